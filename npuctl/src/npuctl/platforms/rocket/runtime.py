"""Running a quantized image classifier on the NPU (through Teflon) or on the CPU (the same
interpreter without a delegate: the reference). The delegate and every model file are first
loaded in a child process (probe), so a crash or Teflon's stderr-only failure becomes one
clear line, never a dead npuctl."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from npuctl.child import run_module
from npuctl.errors import ModelError, NpuError
from npuctl.models.store import Lock, check_model_file, verify

from .child import MODULE as PROBE_MODULE
from .child import NO_DEVICE
from .facts import DEFAULT_DELEGATE
from .litert import interpreter, load_module

if TYPE_CHECKING:
    from npuctl.settings import Settings

TFLITE_IDENTIFIER = b"TFL3"  # the flatbuffer file identifier, bytes 4..8
PROBE_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class TensorSpec:
    index: int
    shape: tuple[int, ...]
    dtype: np.dtype
    scale: float
    zero_point: int
    name: str = ""

    @classmethod
    def of(cls, described: dict) -> TensorSpec:
        return cls(
            int(described["index"]),
            tuple(int(size) for size in described["shape"]),
            np.dtype(str(described["dtype"])),
            float(described["scale"]),
            int(described["zero_point"]),
            str(described.get("name", "")),
        )

    @property
    def quantized(self) -> bool:
        return self.dtype.kind in "iu" and self.scale > 0

    def dequantize(self, raw: np.ndarray) -> np.ndarray:
        if not self.quantized:
            return raw.astype(np.float32)
        return (raw.astype(np.float32) - self.zero_point) * self.scale


def delegate_of(settings: Settings) -> Path:
    return Path(str(settings.options.get("delegate") or DEFAULT_DELEGATE))


def check_tflite_file(path: Path) -> None:
    check_model_file(path)
    with path.open("rb") as stream:
        head = stream.read(8)
    if head[4:8] != TFLITE_IDENTIFIER:
        raise ModelError(f"{path} is not a TensorFlow Lite model (no TFL3 identifier)")


def probe_delegate(delegate: Path, timeout: float = PROBE_TIMEOUT_S) -> str:
    """Teflon's own words when it loads (its stderr); NpuError with the fix when not."""
    if not delegate.exists():
        raise NpuError(
            f"the Teflon delegate {delegate} is not installed: sudo npuctl provision "
            "(mesa-teflon-delegate from trixie-backports), or pass --delegate"
        )
    result = run_module(PROBE_MODULE, ["delegate", str(delegate)], timeout)
    stderr = result.stderr.strip()
    if result.answer is None:
        raise NpuError(f"loading the delegate {delegate} {result.problem}")
    if result.answer.get("ok"):
        return stderr
    if NO_DEVICE in stderr:
        raise NpuError(f"Teflon found no rocket NPU ({NO_DEVICE}): run 'npuctl doctor' to see why")
    raise NpuError(str(result.answer.get("error")))


def probe_model(model: Path, delegate: Path | None, timeout: float = PROBE_TIMEOUT_S) -> dict:
    """The model's tensors, once the very file has run in a child (through the delegate)."""
    args = ["model", str(model), *([str(delegate)] if delegate else [])]
    result = run_module(PROBE_MODULE, args, timeout)
    if result.answer is None:
        raise ModelError(f"loading {model} {result.problem}")
    if not result.answer.get("ok"):
        raise ModelError(f"{model} does not load: {result.answer.get('error')}")
    return result.answer


def proven_tensors(model: Path, delegate: Path | None) -> tuple[list[TensorSpec], list[TensorSpec]]:
    """The inputs and outputs of a .tflite file, once it has run in a child process."""
    check_tflite_file(model)
    return _tensors(probe_model(model, delegate))


def _tensors(described: dict) -> tuple[list[TensorSpec], list[TensorSpec]]:
    """The inputs and outputs as the child probe described them."""
    return (
        [TensorSpec.of(t) for t in described["inputs"]],
        [TensorSpec.of(t) for t in described["outputs"]],
    )


def proven_tensors_of(
    models: list[Path], delegate: Path | None
) -> dict[Path, tuple[list[TensorSpec], list[TensorSpec]]]:
    """proven_tensors of each model, all of them run in one child (a server's start pays one
    start of the runtime); when that child does not answer for every one, each model runs in
    a child of its own, whose answer says which failed and why."""
    for model in models:
        check_tflite_file(model)
    if len(models) > 1:
        args = ["models", str(delegate) if delegate else "-", *(str(model) for model in models)]
        result = run_module(PROBE_MODULE, args, PROBE_TIMEOUT_S * len(models))
        answer = result.answer or {}
        described = answer.get("models")
        if answer.get("ok") and isinstance(described, list) and len(described) == len(models):
            return {model: _tensors(one) for model, one in zip(models, described, strict=True)}
    return {model: _tensors(probe_model(model, delegate)) for model in models}


@dataclass
class Timed:
    raw: np.ndarray
    seconds: float


class LiteModel:
    """A .tflite model, proven in a child process (through the delegate) before it is loaded
    here; ``run`` takes one tensor per input and gives every output."""

    def __init__(self, model: Path, delegate: Path | None) -> None:
        self.path = model
        self.delegate = delegate
        check_tflite_file(model)
        load_module()  # a missing runtime is said before anything else
        if delegate is not None:
            probe_delegate(delegate)
        self.inputs, self.outputs = proven_tensors(model, delegate)
        self._check()
        self._interpreter: Any = interpreter(model, delegate)

    def _check(self) -> None:
        """What this kind of model must look like (ModelError otherwise)."""

    def run_all(self, tensors: list[np.ndarray]) -> tuple[list[np.ndarray], float]:
        started = time.perf_counter()
        for spec, tensor in zip(self.inputs, tensors, strict=True):
            self._interpreter.set_tensor(spec.index, tensor)
        self._interpreter.invoke()
        raw = [self._interpreter.get_tensor(spec.index).copy() for spec in self.outputs]
        return raw, time.perf_counter() - started


class Classifier(LiteModel):
    """A quantized image classifier (1 x H x W x 3 in, one score per class out)."""

    def _check(self) -> None:
        self.input = image_input(self.path, self.inputs)
        if len(self.outputs) != 1:
            raise ModelError(f"{self.path} has {len(self.outputs)} outputs, a classifier has one")
        self.output = self.outputs[0]

    @property
    def size(self) -> tuple[int, int]:
        return self.input.shape[2], self.input.shape[1]  # width, height

    @property
    def classes(self) -> int:
        return int(np.prod(self.output.shape))

    def run(self, tensor: np.ndarray) -> Timed:
        raw, seconds = self.run_all([tensor])
        return Timed(raw[0].reshape(-1), seconds)


def image_input(model: Path, inputs: list[TensorSpec]) -> TensorSpec:
    if len(inputs) != 1:
        raise ModelError(f"{model} has {len(inputs)} inputs; an image classifier has one")
    (spec,) = inputs
    if len(spec.shape) != 4 or spec.shape[0] != 1 or spec.shape[3] != 3:
        shape = "x".join(str(size) for size in spec.shape)
        raise ModelError(f"{model}: its input is {shape}, not an image (1 x height x width x 3)")
    if not spec.quantized:
        raise ModelError(
            f"{model} is a {spec.dtype} model: the NPU runs quantized models only "
            "(uint8 or int8): use a quantized .tflite"
        )
    return spec


def managed_file(settings: Settings, name: str) -> Path:
    """A model or asset of the manifest, downloaded and checked."""
    entry = settings.manifest.get(name)
    check = verify(entry, settings.models_dir, Lock.load(settings.models_dir))
    if check.state in ("missing", "invalid", "mismatch"):
        raise ModelError(f"{name}: {check.detail}")
    return check.path
