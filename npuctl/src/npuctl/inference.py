"""Running models: the glue between the libnoe binding and the numpy pipelines."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .errors import ModelError
from .models.manifest import Entry
from .models.store import Lock, check_model_file, verify
from .noe.binding import Graph, NoeLibrary, Session, TensorInfo, dequantize
from .noe.isolation import probe_model

DEFAULT_TIMEOUT_MS = 10_000


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


@dataclass
class Npu:
    """The NPU as npuctl uses it: the library, and where models live."""

    library_path: Path
    models_dir: Path
    timeout_ms: int = DEFAULT_TIMEOUT_MS
    _library: NoeLibrary | None = None

    @property
    def library(self) -> NoeLibrary:
        if self._library is None:
            self._library = NoeLibrary(self.library_path)
        return self._library

    def resolve(self, entry: Entry | None, explicit: Path | None) -> tuple[Path, bool]:
        """The model file to use, and whether it is trusted (checksum verified)."""
        if explicit is not None:
            check_model_file(explicit)
            return explicit, False
        assert entry is not None
        check = verify(entry, self.models_dir, Lock.load(self.models_dir))
        if check.state in ("missing", "invalid", "mismatch"):
            raise ModelError(f"{entry.name}: {check.detail}")
        return check.path, check.ok

    @contextmanager
    def session(self) -> Iterator[Session]:
        with Session(self.library) as session:
            yield session

    @contextmanager
    def model(
        self, session: Session, path: Path, *, trusted: bool, entry: Entry | None = None
    ) -> Iterator[Model]:
        if not trusted:
            # A file of unknown content goes through a child process first: a malformed
            # one crashes libnoe, which must not take npuctl down.
            check_expectations(entry, path, probe_model(self.library_path, path))
        with session.graph(path) as graph:
            check_expectations(entry, path, {"inputs": graph.inputs, "outputs": graph.outputs})
            yield Model(graph, path, self.timeout_ms)
