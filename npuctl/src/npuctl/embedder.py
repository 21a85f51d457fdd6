"""What a platform gives an embedding service ('npuctl serve', 'npuctl watch'): inputs turned
into tensors (any thread) and tensors into vectors on the NPU (the one thread that owns it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import numpy as np

if TYPE_CHECKING:
    from PIL import Image


class Rejected(ValueError):
    """An input the model cannot take; the message says why and what to do (HTTP 400)."""

    def __init__(self, message: str, code: str = "invalid_input") -> None:
        super().__init__(message)
        self.code = code


class NpuFailure(RuntimeError):
    """An inference that failed; the server answers 503 for that request and goes on."""

    def __init__(self, message: str, kind: str = "npu_error") -> None:
        super().__init__(message)
        self.kind = kind  # "npu_timeout" | "npu_error": the metrics label


@dataclass
class Prepared:
    """One input, ready for the NPU."""

    modality: str  # "text" | "image"
    tensor: np.ndarray
    tokens: int = 0  # what the input counts in 'usage' (an image counts 0)


@dataclass
class JobReuse:
    """Whether one NPU job may run input after input, probed at start (never assumed)."""

    reused: dict[str, bool] = field(default_factory=dict)
    why: dict[str, str] = field(default_factory=dict)


class Embedder(Protocol):
    model_names: tuple[str, ...]  # the first is the one replies name
    dimensions: int
    modalities: tuple[str, ...]
    keys: dict[str, str]  # modality -> the runtime's model that embeds it
    immich_names: tuple[str, ...]  # what Immich's machine learning may ask for (the manifest's)

    def prepare_text(self, text: str, truncate: bool) -> Prepared: ...

    def prepare_token_ids(self, ids: list[int], truncate: bool) -> Prepared: ...

    def prepare_image(self, picture: Image.Image) -> Prepared:
        """A decoded picture as the model's own transform prepares it."""
        ...

    def prepare_photo(self, picture: Image.Image) -> Prepared:
        """A decoded photo as Immich's machine-learning server prepares it for this model
        (its own resize and crop)."""
        ...

    def golden_inputs(self) -> tuple[Prepared, Prepared]:
        """Two different texts: the server's start-up checks that they give different
        vectors (an NPU that ignores its input is not ready)."""
        ...

    def vector(self, modality: str, outputs: list[np.ndarray]) -> np.ndarray:
        """The embedding in a model's raw outputs."""
        ...

    # In-process use ('npuctl watch'): the caller's thread owns the NPU.
    def start(self) -> JobReuse:
        """Load the models (each proven in a child process first) and probe job reuse;
        raises NpuctlError with the doctor's message when that fails."""
        ...

    def embed(self, prepared: Prepared) -> np.ndarray: ...

    def stop(self) -> None: ...
