"""Running models: the glue between the libnoe binding and the numpy pipelines."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from npuctl.errors import ModelError
from npuctl.models.manifest import Entry
from npuctl.models.proofs import FileIdentity, LoadProofs
from npuctl.models.store import Lock, check_model_file, verify

from .facts import DEFAULT_TIMEOUT_MS
from .noe.binding import Graph, NoeLibrary, Session, TensorInfo, dequantize
from .noe.isolation import probe_model

if TYPE_CHECKING:
    from npuctl.settings import Settings


@dataclass
class Timing:
    """Seconds spent per stage of one inference."""

    pipeline: float = 0.0  # create job + load inputs + infer + read outputs + clean
    infer: float = 0.0  # noe_job_infer_sync alone


@dataclass
class Outputs:
    raw: list[np.ndarray]
    infos: list[TensorInfo]
    timing: Timing = field(default_factory=Timing)

    def values(self, index: int = 0) -> np.ndarray:
        return dequantize(self.raw[index], self.infos[index])


class Model:
    """A loaded graph; ``run`` is one full pipeline (a new job per inference)."""

    def __init__(self, graph: Graph, path: Path, timeout_ms: int) -> None:
        self.graph = graph
        self.path = path
        self.timeout_ms = timeout_ms

    @property
    def inputs(self) -> list[TensorInfo]:
        return self.graph.inputs

    def run(self, inputs: list[np.ndarray]) -> Outputs:
        started = time.perf_counter()
        with self.graph.job() as job:
            for index, data in enumerate(inputs):
                job.load(index, data)
            infer_started = time.perf_counter()
            job.infer(self.timeout_ms)
            infer_seconds = time.perf_counter() - infer_started
            raw = [job.output(index) for index in range(len(self.graph.outputs))]
        return Outputs(
            raw, self.graph.outputs, Timing(time.perf_counter() - started, infer_seconds)
        )


def check_expectations(entry: Entry | None, path: Path, tensors: dict) -> None:
    """The model's tensors must be what its manifest entry says (a wrong file otherwise)."""
    if entry is None:
        return
    for kind, expected in (("inputs", entry.inputs), ("outputs", entry.outputs)):
        actual = tensors[kind]
        if expected and len(actual) < len(expected):
            raise ModelError(
                f"{path} has {len(actual)} {kind}, {entry.name} needs "
                f"{len(expected)}: is it the right model?"
            )
        for want, have in zip(expected, actual, strict=False):
            elements = have["elements"] if isinstance(have, dict) else have.count
            if elements != want.elements:
                raise ModelError(
                    f"{path}: {kind[:-1]} of {elements} elements, {entry.name} "
                    f"has {want.elements}: is it the right model?"
                )


@dataclass(frozen=True)
class ModelFile:
    """A model file chosen for a run: its manifest entry (None for --model) and identity."""

    entry: Entry | None
    identity: FileIdentity

    @property
    def path(self) -> Path:
        return self.identity.path


@dataclass
class Npu:
    """The NPU as npuctl uses it: the library, and where models live."""

    library_path: Path
    models_dir: Path
    timeout_ms: int = DEFAULT_TIMEOUT_MS
    _library: NoeLibrary | None = None
    proofs: LoadProofs = field(default_factory=LoadProofs)

    @property
    def library(self) -> NoeLibrary:
        if self._library is None:
            self._library = NoeLibrary(self.library_path)
        return self._library

    def resolve(self, entry: Entry | None, explicit: Path | None) -> ModelFile:
        """The model file to use: ``explicit``, or the managed file of ``entry`` (present
        and matching its checksum where one is known)."""
        if explicit is not None:
            check_model_file(explicit)
            return ModelFile(entry, _identity(explicit))
        assert entry is not None
        check = verify(entry, self.models_dir, Lock.load(self.models_dir))
        if check.state in ("missing", "invalid", "mismatch"):
            raise ModelError(f"{entry.name}: {check.detail}")
        return ModelFile(entry, _identity(check.path, check.sha256))

    @contextmanager
    def session(self) -> Iterator[Session]:
        with Session(self.library) as session:
            yield session

    @contextmanager
    def model(self, session: Session, model: ModelFile) -> Iterator[Model]:
        """Load ``model`` in this process, once it is proven not to crash the library."""
        self.prove_loads(model)
        with session.graph(model.path) as graph:
            check_expectations(
                model.entry, model.path, {"inputs": graph.inputs, "outputs": graph.outputs}
            )
            yield Model(graph, model.path, self.timeout_ms)

    def prove(self, model: ModelFile) -> dict[str, list[dict[str, object]]]:
        """Load the file in a child with this very library, record the proof, and say its
        tensors as the library describes them."""
        library = _identity(self.library_path)
        described = probe_model(self.library_path, model.path)
        check_expectations(model.entry, model.path, described)
        self.proofs.record(library, model.identity)
        return described

    def prove_loads(self, model: ModelFile) -> None:
        """A file goes to libnoe in-process only after this very file loaded once in a child
        with this very library; a checksum says nothing about whether it loads."""
        library = _identity(self.library_path)
        if not self.proofs.proven(library, model.identity):
            self.prove(model)
        if not (model.identity.unchanged() and library.unchanged()):
            raise ModelError(
                f"{model.path} or {self.library_path} changed while npuctl was using it: "
                "run the command again"
            )


def _identity(path: Path, sha256: str | None = None) -> FileIdentity:
    try:
        return FileIdentity.of(path, sha256)
    except OSError as error:
        raise ModelError(f"cannot read {path}: {error.strerror or error}") from error


def npu(settings: Settings) -> Npu:
    """This command's Npu, built from the global options on first use."""
    built = settings.cache.get(__name__)
    if not isinstance(built, Npu):
        built = Npu(
            Path(str(settings.options["library"])),
            settings.models_dir,
            int(str(settings.options["timeout_ms"])),
        )
        settings.cache[__name__] = built
    return built
