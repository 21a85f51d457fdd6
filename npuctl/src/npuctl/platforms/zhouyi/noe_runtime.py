"""libnoe held by one thread for a long-running user (npuctl serve's NPU owner, npuctl watch):
the chosen models loaded once, and one job per model reused from input to input where that
is shown to be safe."""

from __future__ import annotations

import contextlib
from contextlib import ExitStack

import numpy as np

from npuctl.embedder import JobReuse, NpuFailure
from npuctl.errors import NpuctlError

from .noe.abi import TIMEOUT_STATUS
from .noe.binding import Job, Session
from .runtime import Model, ModelFile, Npu


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
        self._session: Session | None = None

    def start(self) -> JobReuse:
        session = self._session = self._stack.enter_context(self.npu.session())
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

    def add(self, key: str, file: ModelFile) -> None:
        """A model proven after the start: loaded at its first inference, on the owner."""
        self.files[key] = file

    def infer(self, key: str, tensors: list[np.ndarray]) -> list[np.ndarray]:
        try:
            model = self.models.get(key) or self._load(key)
            job = self._jobs.get(key)
            if job is None:
                return model.run(tensors).raw
            return self._through(job, model, tensors)
        except NpuctlError as error:
            if key in self.models:
                self._drop_job(key)  # a job that failed is not trusted again
            status = getattr(error, "status", None)
            raise NpuFailure(
                str(error), "npu_timeout" if status == TIMEOUT_STATUS else "npu_error"
            ) from None

    def _load(self, key: str) -> Model:
        assert self._session is not None, "the runtime has not started"
        loaded = self._stack.enter_context(self.npu.model(self._session, self.files[key]))
        self.models[key] = loaded
        return loaded

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
