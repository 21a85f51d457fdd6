"""The Zhouyi NPU in 'npuctl serve': one libnoe runtime (the library is not thread-safe, so one
owner thread), YOLOv8n served as detection and CLIP as embeddings; every model also answers
raw tensors over the open inference protocol."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
from PIL import Image

from npuctl.errors import ExitCode, ModelError, NpuctlError
from npuctl.models.manifest import FrigateFacts
from npuctl.platforms.zhouyi.noe.abi import DataType
from npuctl.platforms.zhouyi.noe.binding import TensorInfo, dequantize, quantize
from npuctl.platforms.zhouyi.noe_runtime import NoeRuntime
from npuctl.platforms.zhouyi.pipelines import yolo
from npuctl.platforms.zhouyi.preparation import clip_input
from npuctl.platforms.zhouyi.runtime import npu
from npuctl.vision import golden_picture

from ..models import DETECTION, EMBEDDING, ServedModel, Serving, TensorMeta, chosen_models
from . import OpenServing

if TYPE_CHECKING:
    from pathlib import Path

    from npuctl.platforms.zhouyi.embedder import ClipEmbedder
    from npuctl.settings import Settings
    from npuctl.vision import Detection

    from ..models import Runtime

# Served models and the other names --models takes for them.
KNOWN: dict[str, tuple[str, ...]] = {
    "yolov8n": ("yolo",),
    "clip-text": ("clip",),
    "clip-visual": ("clip",),
}


def _runtime(runtime: Runtime) -> NoeRuntime:
    assert isinstance(runtime, NoeRuntime)
    return runtime


def _meta(name: str, info: TensorInfo, shape: tuple[int, ...]) -> TensorMeta:
    """libnoe describes sizes, not shapes: the model's documented shape when it fits."""
    return TensorMeta(
        name, info.dtype, shape if int(np.prod(shape)) == info.count else (info.count,)
    )


class _Served:
    """A model of this runtime with the tensors it declares once loaded."""

    task = ""
    description = ""
    input_shapes: tuple[tuple[str, tuple[int, ...]], ...] = ()
    output_shapes: tuple[tuple[str, tuple[int, ...]], ...] = ()

    def __init__(self, name: str) -> None:
        self.name = self.key = name
        self.input_infos: list[TensorInfo] = []
        self.output_infos: list[TensorInfo] = []

    def bind(self, runtime: Runtime) -> None:
        model = _runtime(runtime).models[self.key]
        self.input_infos, self.output_infos = model.inputs, model.graph.outputs

    def comparable(self, outputs: list[np.ndarray]) -> list[np.ndarray]:
        return outputs

    @property
    def inputs(self) -> tuple[TensorMeta, ...]:
        return tuple(
            _meta(named[0], info, named[1])
            for named, info in zip(self.input_shapes, self.input_infos, strict=False)
        )

    @property
    def outputs(self) -> tuple[TensorMeta, ...]:
        return tuple(
            _meta(named[0], info, named[1])
            for named, info in zip(self.output_shapes, self.output_infos, strict=False)
        )


class YoloDetector(_Served):
    task = DETECTION
    description = "YOLOv8n object detection, 80 COCO classes"
    input_shapes = (("images", (1, 3, yolo.SIZE, yolo.SIZE)),)
    output_shapes = (("output0", (1, 84, 8400)),)

    def prepare(self, picture: Image.Image) -> tuple[list[np.ndarray], object]:
        pixels, box = yolo.letterbox_pixels(picture)
        info = self.input_infos[0]
        if info.dtype == np.uint8 and info.scale == 255.0 and info.zero_point == 0:
            return [pixels], box  # q = round(p / 255 * 255): the pixels themselves
        return [quantize(pixels.astype(np.float32) * np.float32(1 / 255), info)], box

    def frame(self, pixels: np.ndarray) -> tuple[list[np.ndarray], object]:
        size = yolo.SIZE
        whole = yolo.Letterbox(1.0, 0.0, 0.0, size, size)  # nothing to map back
        info = self.input_infos[0]
        if info.dtype == np.uint8 and info.scale == 255.0 and info.zero_point == 0:
            return [pixels], whole
        return [quantize(pixels.astype(np.float32) * np.float32(1 / 255), info)], whole

    def detections(
        self, outputs: list[np.ndarray], context: object, min_confidence: float, limit: int
    ) -> list[Detection]:
        assert isinstance(context, yolo.Letterbox)
        info, raw = self.output_infos[0], outputs[0]
        # decode() reads float16 as it is; converting 700,000 of them first costs a millisecond
        values = raw if info.dtype.kind == "f" else dequantize(raw, info)
        return yolo.decode(values, context, conf=min_confidence, max_detections=limit)

    def golden(self) -> list[list[np.ndarray]]:
        return [self.prepare(golden_picture(0))[0]]


class ClipModel(_Served):
    """One CLIP encoder as raw tensors (/v2); the embeddings API goes through ClipEmbedder."""

    task = EMBEDDING

    def __init__(
        self, name: str, golden: Callable[[], list[list[np.ndarray]]] | None = None
    ) -> None:
        super().__init__(name)
        text = name == "clip-text"
        self.description = f"CLIP ViT-B/32 {'text' if text else 'image'} encoder, 512-d"
        self.input_shapes = (
            (("input_ids", (1, 77)),) if text else (("pixel_values", (1, 3, 224, 224)),)
        )
        self.output_shapes = (("embedding", (1, 512)),)
        self._golden = golden

    def golden(self) -> list[list[np.ndarray]]:
        if self._golden is not None:
            return self._golden()
        return [[clip_input(golden_picture(seed), self.input_infos[0])] for seed in (0, 1)]


def _golden_texts(embedder: ClipEmbedder) -> Callable[[], list[list[np.ndarray]]]:
    """The embedder's golden texts as token tensors, made once the model's dtype is known."""
    return lambda: [[prepared.tensor] for prepared in embedder.golden_inputs()]


def open_serving(settings: Settings, wanted: tuple[str, ...] | None, workers: int) -> Serving:
    if workers != 1:
        raise NpuctlError(
            "--workers: libnoe is not thread-safe, so the Zhouyi serves with one worker "
            "(leave --workers out)",
            ExitCode.USAGE,
        )
    device, manifest = npu(settings), settings.manifest
    chosen = chosen_models(settings, KNOWN, wanted)
    files = {name: device.resolve(manifest.model(name), None) for name in chosen}
    runtime = NoeRuntime(device, files)
    embedder = None
    if "clip-text" in files:
        from npuctl.platforms.zhouyi.embedder import ClipEmbedder

        embedder = ClipEmbedder(settings, runtime)
    models: dict[str, object] = {}
    for name in chosen:
        if name == "yolov8n":
            models[name] = YoloDetector(name)
        elif name == "clip-text" and embedder is not None:
            models[name] = ClipModel(name, _golden_texts(embedder))
        else:
            models[name] = ClipModel(name)
    return Serving(models, [runtime], embedder)  # type: ignore[arg-type]


def _info(index: int, described: dict[str, object]) -> TensorInfo:
    """A tensor as the child probe described it, as libnoe's descriptor."""
    return TensorInfo(
        index,
        index,
        int(str(described["size"])),
        float(str(described["scale"])),
        int(str(described["zero_point"])),
        int(DataType[str(described["dtype"])]),
    )


def upload(
    settings: Settings, serving: Serving, name: str, path: Path
) -> tuple[ServedModel, FrigateFacts]:
    """A YOLOv8-shaped detector (.cix: 3x640x640 in, 84x8400 out), proven in a child."""
    runtime = _runtime(serving.runtimes[0])
    file = runtime.npu.resolve(None, path)
    described = runtime.npu.prove(file)  # ModelError when it crashes libnoe in the child
    model = YoloDetector(name)
    model.input_infos = [_info(i, d) for i, d in enumerate(described["inputs"])]
    model.output_infos = [_info(i, d) for i, d in enumerate(described["outputs"])]
    wanted = [int(np.prod(shape)) for _, shape in (*model.input_shapes, *model.output_shapes)]
    counts = [info.count for info in (*model.input_infos, *model.output_infos)]
    if counts != wanted:
        raise ModelError(
            f"{name} is not a detector this server runs: the Zhouyi serves YOLOv8-shaped "
            f"models (input 3x{yolo.SIZE}x{yolo.SIZE}, output 84x8400)"
        )
    runtime.add(name, file)
    return model, FrigateFacts("yologeneric", "nchw", "bgr", "/labelmap/coco-80.txt")


ADAPTER = OpenServing(open_serving, upload)
