"""The RK3588 NPU in 'npuctl serve': SSDLite MobileDet served as detection, MobileNet V1/V2 as
classification. Each worker is one interpreter per model with its own Teflon delegate, so
--workers N lets N jobs reach the NPU's cores at once; every model file and the delegate are
proven in a child process once, before any worker loads them."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from PIL import Image

from npuctl.embedder import JobReuse, NpuFailure
from npuctl.errors import ModelError
from npuctl.models.manifest import FrigateFacts
from npuctl.platforms.rocket import detect
from npuctl.platforms.rocket.classify import image_tensor, read_labels, top
from npuctl.platforms.rocket.litert import interpreter, load_module
from npuctl.platforms.rocket.runtime import (
    TFLITE_IDENTIFIER,
    TensorSpec,
    delegate_of,
    image_input,
    managed_file,
    probe_delegate,
    proven_tensors_of,
)
from npuctl.vision import golden_picture

from ..models import CLASSIFICATION, DETECTION, ServedModel, Serving, TensorMeta, chosen_models
from . import OpenServing

if TYPE_CHECKING:
    from npuctl.settings import Settings
    from npuctl.vision import Detection

    from ..models import Runtime

log = logging.getLogger("npuctl.serve")
# Served models and the other names --models takes for them.
KNOWN = {
    "ssdlite": ("ssdlite-mobiledet", "mobiledet"),
    "mobilenet": ("mobilenet-v1",),
    "mobilenet-v2": (),
}
DESCRIPTIONS = {
    "ssdlite": "SSDLite MobileDet object detection, COCO",
    "mobilenet": "MobileNet V1 image classification, 1001 ImageNet classes",
    "mobilenet-v2": "MobileNet V2 image classification, 1001 ImageNet classes",
}


class LiteRuntime:
    """One worker: an interpreter per model, each through a delegate of its own."""

    def __init__(
        self, files: dict[str, Path], delegate: Path | None, specs: dict[str, Any]
    ) -> None:
        self.files = files
        self.delegate = delegate
        self.specs = specs  # key -> (inputs, outputs) as the child probe described them
        self._interpreters: dict[str, Any] = {}

    def start(self) -> JobReuse:
        for key, path in self.files.items():
            self._interpreters[key] = interpreter(path, self.delegate)
        return JobReuse({key: True for key in self.files})

    def add(self, key: str, path: Path, specs: tuple[list[TensorSpec], list[TensorSpec]]) -> None:
        """A model proven after the start: loaded at its first inference, on this owner."""
        self.specs[key] = specs
        self.files[key] = path

    def infer(self, key: str, tensors: list[np.ndarray]) -> list[np.ndarray]:
        loaded = self._interpreters.get(key)
        if loaded is None:
            loaded = self._interpreters[key] = interpreter(self.files[key], self.delegate)
        inputs, outputs = self.specs[key]
        try:
            for spec, tensor in zip(inputs, tensors, strict=True):
                loaded.set_tensor(spec.index, tensor)
            loaded.invoke()  # the runtime lets go of the GIL meanwhile
            return [loaded.get_tensor(spec.index).copy() for spec in outputs]
        except (RuntimeError, ValueError) as error:
            raise NpuFailure(f"the TensorFlow Lite runtime failed: {error}") from None

    def stop(self) -> None:
        self._interpreters.clear()


def _metas(specs: list[TensorSpec], fallback: str) -> tuple[TensorMeta, ...]:
    return tuple(
        TensorMeta(spec.name or f"{fallback}{index}", spec.dtype, spec.shape)
        for index, spec in enumerate(specs)
    )


class _Served:
    task = ""

    def __init__(self, name: str, inputs: list[TensorSpec], outputs: list[TensorSpec]) -> None:
        self.name = self.key = name
        self.description = DESCRIPTIONS.get(name, name)
        self.input_specs, self.output_specs = inputs, outputs
        self.input = inputs[0]

    def bind(self, runtime: Runtime) -> None:
        """The child probe described the tensors already."""

    def comparable(self, outputs: list[np.ndarray]) -> list[np.ndarray]:
        return outputs

    @property
    def inputs(self) -> tuple[TensorMeta, ...]:
        return _metas(self.input_specs, "input")

    @property
    def outputs(self) -> tuple[TensorMeta, ...]:
        return _metas(self.output_specs, "output")

    def prepare(self, picture: Image.Image) -> tuple[list[np.ndarray], object]:
        return [image_tensor(picture, self.input)], picture.size

    def golden(self) -> list[list[np.ndarray]]:
        return [self.prepare(golden_picture(0))[0]]


class SsdDetector(_Served):
    task = DETECTION

    def __init__(
        self, name: str, inputs: list[TensorSpec], outputs: list[TensorSpec], path: Path
    ) -> None:
        super().__init__(name, inputs, outputs)
        self.order = detect.output_order(path, outputs)
        self.labels = detect.read_labels(None)

    def comparable(self, outputs: list[np.ndarray]) -> list[np.ndarray]:
        """The detections the count covers: the post-processing op leaves the rest of its
        outputs as they were."""
        return detect.found(outputs, self.order)

    def frame(self, pixels: np.ndarray) -> tuple[list[np.ndarray], object]:
        spec = self.input
        size = (spec.shape[2], spec.shape[1])  # width, height: the boxes in the frame's pixels
        if spec.dtype == np.int8:
            return [(pixels.astype(np.int16) - 128).astype(np.int8)], size
        return [pixels], size

    def detections(
        self, outputs: list[np.ndarray], context: object, min_confidence: float, limit: int
    ) -> list[Detection]:
        assert isinstance(context, tuple)
        found = detect.detections(outputs, self.order, context, self.labels, min_confidence)
        return found[:limit]


class MobileNetClassifier(_Served):
    task = CLASSIFICATION

    def __init__(
        self, name: str, inputs: list[TensorSpec], outputs: list[TensorSpec], labels: list[str]
    ) -> None:
        super().__init__(name, inputs, outputs)
        if len(outputs) != 1:
            raise ModelError(f"{name} has {len(outputs)} outputs, a classifier has one")
        self.labels = labels

    def classes(self, outputs: list[np.ndarray], count: int) -> list[tuple[str, float]]:
        raw = outputs[0].reshape(-1)
        return [(p.label, p.score) for p in top(raw, self.output_specs[0], self.labels, count)]


def open_serving(settings: Settings, wanted: tuple[str, ...] | None, workers: int) -> Serving:
    chosen = chosen_models(settings, KNOWN, wanted)
    delegate = delegate_of(settings)
    _warn_of_known_wrong(settings, chosen)
    load_module()  # a missing runtime is said before anything else
    probe_delegate(delegate)
    files: dict[str, Path] = {}
    specs: dict[str, Any] = {}
    models: dict[str, Any] = {}
    for name in chosen:
        files[name] = managed_file(settings, name)
    proven = proven_tensors_of(list(files.values()), delegate)
    for name, path in files.items():
        inputs, outputs = proven[path]
        image_input(path, inputs)
        specs[name] = (inputs, outputs)
        if name == "ssdlite":
            models[name] = SsdDetector(name, inputs, outputs, path)
        else:
            classes = int(np.prod(outputs[0].shape)) if outputs else 0
            labels = read_labels(managed_file(settings, "mobilenet-labels"), classes)
            models[name] = MobileNetClassifier(name, inputs, outputs, labels)
    runtimes = [LiteRuntime(files, delegate, specs) for _ in range(workers)]
    return Serving(models, runtimes)  # type: ignore[arg-type]


def _warn_of_known_wrong(settings: Settings, chosen: list[str]) -> None:
    """One log line per served model that the installed Teflon's release is known to compute
    wrongly (teflon.yaml): it is served, as asked, and the operator is told why its answers
    differ from the CPU's and what to install."""
    from npuctl.platforms.rocket import teflon
    from npuctl.system import System

    version = teflon.installed(System())
    known = teflon.description()
    fixed = known.fixed_by_wanted(version)
    wrong = known.wrong_in(version) or ()
    for name in chosen:
        causes = [item for item in wrong if name in item.served]
        if not causes:
            continue
        log.warning(
            "%s: Mesa Teflon %s %s; its answers differ from the CPU's (%s)",
            name,
            version,
            "; and ".join(item.what for item in causes),
            f"npuctl doctor says how to install Mesa {'.'.join(map(str, known.wanted_release))}"
            if all(item in fixed for item in causes)
            else "no Mesa release npuctl knows computes it as real RK3588 boards show; "
            "npuctl doctor's golden check says what this board computes",
        )


def upload(
    settings: Settings, serving: Serving, name: str, path: Path
) -> tuple[ServedModel, FrigateFacts]:
    """An SSD detector with TFLite's post-processing, proven with Teflon in a child."""
    if path.read_bytes()[4:8] != TFLITE_IDENTIFIER:
        raise ModelError(f"{name} is not a TensorFlow Lite model (.tflite)")
    delegate = delegate_of(settings)
    inputs, outputs = proven_tensors_of([path], delegate)[path]
    image_input(path, inputs)
    model = SsdDetector(name, inputs, outputs, path)  # ModelError: not an SSD detector
    for runtime in serving.runtimes:
        assert isinstance(runtime, LiteRuntime)
        runtime.add(name, path, (inputs, outputs))
    return model, FrigateFacts("ssd", "nhwc", "rgb", "/labelmap.txt")


ADAPTER = OpenServing(open_serving, upload)
