"""What 'npuctl serve' needs of an NPU family, and nothing about any family: a runtime per NPU
owner thread (the only code that calls the vendor library), and the served models, which turn
requests into tensors and tensors into answers on the request threads.

A platform's ``serving`` factory returns a :class:`Serving`; every model in it may run on every
runtime in it (a family with one runtime, like libnoe, has one owner thread; the RK3588 has one
per --workers, each with its own Teflon delegate)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np

if TYPE_CHECKING:
    from PIL import Image

    from ..embedder import Embedder, JobReuse
    from ..settings import Settings
    from ..vision import Detection

DETECTION, CLASSIFICATION, EMBEDDING = "detection", "classification", "embedding"

# KServe v2 / Triton datatype names of the numpy types a model may take or give.
V2_DATATYPES: dict[np.dtype, str] = {
    np.dtype(np.uint8): "UINT8",
    np.dtype(np.int8): "INT8",
    np.dtype(np.uint16): "UINT16",
    np.dtype(np.int16): "INT16",
    np.dtype(np.int32): "INT32",
    np.dtype(np.int64): "INT64",
    np.dtype(np.float16): "FP16",
    np.dtype(np.float32): "FP32",
    np.dtype(np.float64): "FP64",
}
NUMPY_OF_V2: dict[str, np.dtype] = {name: dtype for dtype, name in V2_DATATYPES.items()}


@dataclass(frozen=True)
class TensorMeta:
    """A model's input or output as the open inference protocol describes it."""

    name: str
    dtype: np.dtype
    shape: tuple[int, ...]

    @property
    def datatype(self) -> str:
        return V2_DATATYPES[np.dtype(self.dtype)]

    @property
    def elements(self) -> int:
        return int(np.prod(self.shape))

    def document(self) -> dict[str, object]:
        return {"name": self.name, "datatype": self.datatype, "shape": list(self.shape)}


class Runtime(Protocol):
    """One NPU owner's view of the vendor library; every method runs on that owner's thread."""

    def start(self) -> JobReuse:
        """Load every model (each file proven in a child process first) and probe what may
        be reused between inputs; raises NpuctlError with the doctor's message."""
        ...

    def infer(self, key: str, tensors: list[np.ndarray]) -> list[np.ndarray]:
        """The model's raw outputs; raises NpuFailure when the NPU fails (one request fails,
        serving goes on)."""
        ...

    def stop(self) -> None: ...


class ServedModel(Protocol):
    name: str  # the name clients use (/v2/models/NAME, 'model' in requests)
    task: str  # DETECTION | CLASSIFICATION | EMBEDDING
    key: str  # the model the runtime loaded
    description: str

    def bind(self, runtime: Runtime) -> None:
        """Learn the loaded model's tensors (dtype, quantization) from the first runtime,
        after it started."""
        ...

    @property
    def inputs(self) -> tuple[TensorMeta, ...]: ...

    @property
    def outputs(self) -> tuple[TensorMeta, ...]: ...

    def comparable(self, outputs: list[np.ndarray]) -> list[np.ndarray]:
        """What of an answer must repeat for the same input (all of it, for most models)."""
        ...

    def golden(self) -> list[list[np.ndarray]]:
        """One input, or two different ones: start-up checks that the first gives the same
        answer twice, and a different one from the second (an NPU that ignores its input is
        not ready); /ready recomputes the first."""
        ...


class Detector(ServedModel, Protocol):
    def prepare(self, picture: Image.Image) -> tuple[list[np.ndarray], object]:
        """The input tensors, and what detections() needs to map boxes back."""
        ...

    def frame(self, pixels: np.ndarray) -> tuple[list[np.ndarray], object]:
        """A frame already at the model's input size: uint8 pixels in the shape of
        ``inputs[0]`` (in the channel order the model takes), as its input tensors, and what
        detections() needs to give boxes in the frame's own pixels. No copy where the model
        takes the pixels as they are."""
        ...

    def detections(
        self, outputs: list[np.ndarray], context: object, min_confidence: float, limit: int
    ) -> list[Detection]:
        """At most ``limit`` detections, best first: the post-processing's cost is bounded
        by the answer's size, not by how busy the scene is."""
        ...


class Classifier(ServedModel, Protocol):
    def prepare(self, picture: Image.Image) -> tuple[list[np.ndarray], object]: ...

    def classes(self, outputs: list[np.ndarray], count: int) -> list[tuple[str, float]]:
        """The best ``count`` labels with their scores, best first."""
        ...


@dataclass
class Serving:
    """What one family serves: its models by name, its runtimes (one NPU owner thread each)
    and, when it embeds, the embedder that prepares texts and images."""

    models: dict[str, ServedModel]
    runtimes: list[Runtime]
    embedder: Embedder | None = None

    def of_task(self, task: str) -> list[ServedModel]:
        return [model for model in self.models.values() if model.task == task]


def chosen_models(
    settings: Settings,
    known: dict[str, tuple[str, ...]],
    wanted: tuple[str, ...] | None,
) -> list[str]:
    """The models to serve (see choose), with npuctl's errors: an unknown name is a usage
    error, nothing downloaded a model error naming what to fetch."""
    from ..errors import ExitCode, NpuctlError

    manifest = settings.manifest
    available = [name for name in known if (settings.models_dir / manifest.get(name).file).exists()]
    try:
        names = choose(known, available, wanted)
    except ValueError as error:
        raise NpuctlError(str(error), ExitCode.USAGE) from None
    if not names:
        raise NpuctlError(
            f"no model to serve is downloaded: npuctl models fetch {' '.join(known)}",
            ExitCode.MODEL,
        )
    return names


def choose(
    known: dict[str, tuple[str, ...]], available: list[str], wanted: tuple[str, ...] | None
) -> list[str]:
    """The model names to serve: ``wanted`` (--models, names or aliases from ``known``), or
    every known model whose files are downloaded. Raises ValueError naming what is unknown."""
    if wanted is None:
        return [name for name in known if name in available]
    chosen: list[str] = []
    for name in wanted:
        aliases = [model for model, names in known.items() if name == model or name in names]
        if not aliases:
            raise ValueError(
                f"--models: no model {name!r} on this NPU; it serves {', '.join(known)}"
            )
        chosen.extend(model for model in aliases if model not in chosen)
    return chosen
