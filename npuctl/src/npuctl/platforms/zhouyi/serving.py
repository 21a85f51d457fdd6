"""The Zhouyi NPU in 'npuctl serve': one libnoe runtime (the library is not thread-safe, so one
owner thread), YOLOv8n served as detection and CLIP as embeddings; every model also answers
raw tensors over the open inference protocol."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import ExitStack
from typing import TYPE_CHECKING

import numpy as np
from PIL import Image

from npuctl.embedder import JobReuse, NpuFailure
from npuctl.errors import ExitCode, NpuctlError
from npuctl.serve.models import DETECTION, EMBEDDING, Serving, TensorMeta, chosen_models
from npuctl.vision import golden_picture

from .noe.abi import TIMEOUT_STATUS
from .noe.binding import Job, TensorInfo, dequantize, quantize
from .pipelines import yolo
from .runtime import Model, ModelFile, Npu, npu

if TYPE_CHECKING:
    from npuctl.cli import Settings
    from npuctl.serve.models import Runtime
    from npuctl.vision import Detection

    from .embedder import ClipEmbedder

# Served models and the other names --models takes for them.
KNOWN = {"yolov8n": ("yolo",), "clip-text": ("clip",), "clip-visual": ("clip",)}


class NoeRuntime:
    """libnoe with the chosen models loaded; one job per model is reused from input to input
    where a probe at start shows that a reused job answers like a new one."""

    def __init__(self, device: Npu, files: dict[str, ModelFile]) -> None:
        self.npu = device
        self.files = files
        self.models: dict[str, Model] = {}
        self.reuse = JobReuse()
        self._jobs: dict[str, Job] = {}
        self._job_stacks: dict[str, ExitStack] = {}
        self._stack = ExitStack()

    def start(self) -> JobReuse:
        session = self._stack.enter_context(self.npu.session())
        for key, file in self.files.items():
            self.models[key] = self._stack.enter_context(self.npu.model(session, file))
        for key, model in self.models.items():
            self._probe_reuse(key, model)
        return self.reuse

    def _probe_reuse(self, key: str, model: Model) -> None:
        """A job may serve input after input only if its second answer equals a new job's
        answer to the same input (some runtimes keep the first inputs or outputs)."""
        firsts = [np.zeros(info.count, dtype=info.dtype) for info in model.inputs]
        seconds = [np.ones(info.count, dtype=info.dtype) for info in model.inputs]
        fresh = model.run(seconds).raw
        stack = ExitStack()
        job = stack.enter_context(model.graph.job())
        reused = [self._through(job, model, data) for data in (firsts, seconds)]
        same = all(np.array_equal(a, b) for a, b in zip(reused[1], fresh, strict=True))
        moved = not all(np.array_equal(a, b) for a, b in zip(reused[0], reused[1], strict=True))
        if same and moved:
            self._jobs[key], self._job_stacks[key] = job, stack
            self.reuse.reused[key] = True
        else:
            stack.close()
            self.reuse.reused[key] = False
            self.reuse.why[key] = "a reused job answered differently: a new job per input"

    @staticmethod
    def _through(job: Job, model: Model, tensors: list[np.ndarray]) -> list[np.ndarray]:
        for index, data in enumerate(tensors):
            job.load(index, data)
        job.infer(model.timeout_ms)
        return [job.output(index) for index in range(len(model.graph.outputs))]

    def infer(self, key: str, tensors: list[np.ndarray]) -> list[np.ndarray]:
        model = self.models[key]
        try:
            job = self._jobs.get(key)
            if job is None:
                return model.run(tensors).raw
            return self._through(job, model, tensors)
        except NpuctlError as error:
            self._drop_job(key)  # a job that failed is not trusted again
            status = getattr(error, "status", None)
            raise NpuFailure(
                str(error), "npu_timeout" if status == TIMEOUT_STATUS else "npu_error"
            ) from None

    def _drop_job(self, key: str) -> None:
        stack = self._job_stacks.pop(key, None)
        self._jobs.pop(key, None)
        if stack is not None:
            with contextlib.suppress(NpuctlError):
                stack.close()
        if self.reuse.reused.get(key):
            stack = ExitStack()
            try:
                self._jobs[key] = stack.enter_context(self.models[key].graph.job())
                self._job_stacks[key] = stack
            except NpuctlError:
                stack.close()  # the next input runs on a new job of its own

    def stop(self) -> None:
        for key in list(self._job_stacks):
            self._job_stacks.pop(key).close()
        self._jobs.clear()
        self._stack.close()


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
        from .commands import clip_input

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
        from .embedder import ClipEmbedder

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
