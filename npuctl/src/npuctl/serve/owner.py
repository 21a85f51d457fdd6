"""The threads that own the NPU. The vendor runtimes are not thread-safe, so every call into
one happens on its owner thread (one per runtime: libnoe has one, the RK3588 one per --workers,
each with its own delegate); requests wait in one bounded queue that every owner takes from,
each with a deadline, and tensors are prepared and answers encoded by the request threads, so
the NPU never waits for them."""

from __future__ import annotations

import _thread
import contextlib
import math
import queue
import threading
import time
from collections.abc import Callable

import numpy as np

from ..embedder import JobReuse, NpuFailure
from ..errors import NpuctlError
from . import affinity
from .metrics import Metrics
from .models import Runtime, ServedModel

# A vector must match the start-up golden vector this closely (cosine) to count as ready.
GOLDEN_MIN_COSINE = 0.999
_STOP = object()


class QueueFull(Exception):
    def __init__(self, retry_after: int) -> None:
        super().__init__(f"the queue is full: retry after {retry_after} s")
        self.retry_after = retry_after


class DeadlineExceeded(NpuFailure):
    def __init__(self, waited: float) -> None:
        super().__init__(
            f"the request waited {waited:.1f} s for the NPU, past its deadline", "deadline"
        )


class Work:
    """One input on its way through the NPU. Lighter than a concurrent.futures.Future or a
    threading.Event: the hand-over between threads is most of the server's own cost."""

    __slots__ = (
        "_done",
        "cancelled",
        "deadline",
        "enqueued",
        "error",
        "key",
        "notify",
        "npu_seconds",
        "outputs",
        "queued_seconds",
        "tensors",
    )

    def __init__(self, key: str, tensors: list[np.ndarray], deadline: float) -> None:
        self.key = key
        self.tensors = tensors
        self.deadline = deadline
        self.enqueued = time.monotonic()
        self._done = _thread.allocate_lock()
        self._done.acquire()  # released once, by finish()
        self.outputs: list[np.ndarray] | None = None
        self.error: BaseException | None = None
        self.cancelled = False  # the client left: skip it
        self.notify: Callable[[], None] | None = None  # called once finished (any thread)
        self.queued_seconds = self.npu_seconds = 0.0  # measured by the owner, for the answer

    def finish(
        self, outputs: list[np.ndarray] | None, error: BaseException | None = None
    ) -> Callable[[], None] | None:
        """Record the outcome and mark the work done; what wakes the waiter that asked to be
        woken (the owner has it called), or None."""
        self.outputs, self.error = outputs, error
        self._done.release()
        return self.notify

    @property
    def done(self) -> bool:
        return not self._done.locked()

    def wait(self, timeout: float) -> bool:
        """Whether it is done, waiting at most ``timeout`` seconds."""
        if not self._done.acquire(timeout=timeout):
            return False
        self._done.release()  # done stays done for the next caller
        return True

    def result(self, timeout: float) -> list[np.ndarray] | None:
        """The outputs; None while not done after ``timeout``; raises the inference's error."""
        if not self.wait(timeout):
            return None
        if self.error is not None:
            raise self.error
        return self.outputs


class NpuOwner:
    def __init__(
        self,
        runtimes: list[Runtime],
        models: dict[str, ServedModel],
        capacity: int,
        metrics: Metrics,
    ) -> None:
        self.runtimes = runtimes
        self.models = models
        self.capacity = capacity
        self.metrics = metrics
        self.reuse = JobReuse()
        self.golden: dict[str, np.ndarray] = {}  # each model's answer to its golden input
        self._busy: list[float | None] = [None] * len(runtimes)  # when each owner's call began
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._pending = 0
        self._lock = threading.Lock()
        self._service_seconds = 0.0  # moving average of one NPU call
        self._threads = [
            threading.Thread(
                target=self._run, args=(index,), name=f"npu-owner-{index}", daemon=True
            )
            for index in range(len(runtimes))
        ]
        self._wakes: queue.SimpleQueue = queue.SimpleQueue()  # waiters of finished work
        self._waker = threading.Thread(target=self._wake_waiters, name="npu-waker", daemon=True)
        self._started = [threading.Event() for _ in runtimes]
        self._start_errors: list[BaseException | None] = [None] * len(runtimes)
        metrics.queue_depth.set_function(lambda: self._pending)  # read when scraped

    @property
    def busy_since(self) -> float | None:
        """When the oldest NPU call in progress started."""
        return min((since for since in self._busy if since is not None), default=None)

    # -- life cycle -----------------------------------------------------------------------
    def start(self) -> None:
        """Load, probe and warm up every runtime on its owner thread, one after the other (a
        second delegate is not opened while the first loads); raise what went wrong there."""
        self._waker.start()
        for index, thread in enumerate(self._threads):
            thread.start()
            self._started[index].wait()
            if (error := self._start_errors[index]) is not None:
                self.stop()
                raise error

    def stop(self, timeout: float | None = None) -> bool:
        """Finish what is queued, then release the NPU; False when an owner is still inside
        an NPU call after ``timeout`` (a hung call ends with the process)."""
        alive = [thread for thread in self._threads if thread.is_alive()]
        for _ in alive:
            self._queue.put(_STOP)
        for thread in alive:
            thread.join(timeout)
        stopped = not any(thread.is_alive() for thread in alive)
        if stopped and self._waker.is_alive():  # every finished work's waiter woken first
            self._wakes.put(_STOP)
            self._waker.join()
        return stopped

    def _wake_waiters(self) -> None:
        """Wakes the event loop for finished work, as SCHED_BATCH: it runs once the owner
        sleeps, in its next NPU call or on an empty queue. The loop preempts whatever runs
        when it wakes: woken by the owner itself, it took the owner's core, and beside a busy
        process the owner then waited a whole time slice to hand the NPU its next job."""
        affinity.name_thread("npu-waker")
        affinity.wait_for_the_holder()
        while (wake := self._wakes.get()) is not _STOP:
            with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits
                wake()

    def _run(self, index: int) -> None:
        # The owner keeps the default policy: woken by the NPU's answer, it runs at once
        # and hands the device its next job. As SCHED_BATCH it waited behind whatever ran
        # on its core, the NPU idle meanwhile.
        affinity.name_thread(f"npu-owner-{index}")
        runtime = self.runtimes[index]
        try:
            reuse = runtime.start()
            if index == 0:
                self.reuse = reuse
                for model in self.models.values():
                    model.bind(runtime)
            self._warm_up(index, runtime)
        except BaseException as error:  # handed to start(), which raises it in the caller
            self._start_errors[index] = error
            self._started[index].set()
            return
        self._started[index].set()
        try:
            while (work := self._queue.get()) is not _STOP:
                self._serve(index, runtime, work)
        finally:
            runtime.stop()

    def _warm_up(self, index: int, runtime: Runtime) -> None:
        """The first owner proves each model: finite, the same answer twice, another answer for
        another input. Every other owner must then give the first owner's answer: that one
        call proves it as well, and start-up stays one call per model and owner."""
        for name, model in self.models.items():
            first, *others = model.golden()
            golden = golden_view(model, self._timed(index, runtime, model.key, first))
            if not np.all(np.isfinite(golden)):
                raise NpuctlError(
                    f"{name}: the NPU's warm-up answer is not finite: run 'npuctl doctor'"
                )
            if index > 0:
                if similarity(golden, self.golden[name]) < GOLDEN_MIN_COSINE:
                    raise NpuctlError(
                        f"{name}: worker {index} answers differently from worker 0: "
                        "run 'npuctl doctor'"
                    )
                continue
            again = golden_view(model, self._timed(index, runtime, model.key, first))
            if similarity(golden, again) < GOLDEN_MIN_COSINE:
                raise NpuctlError(
                    f"{name}: the NPU gives different answers for the same input: "
                    "run 'npuctl doctor'"
                )
            for other in others:
                if (
                    similarity(
                        golden, golden_view(model, self._timed(index, runtime, model.key, other))
                    )
                    >= GOLDEN_MIN_COSINE
                ):
                    raise NpuctlError(
                        f"{name}: the NPU gives the same answer for different inputs: "
                        "run 'npuctl doctor'"
                    )
            self.golden[name] = golden

    # -- the queue ------------------------------------------------------------------------
    def submit(self, items: list[tuple[str, list[np.ndarray]]], deadline: float) -> list[Work]:
        """Queue every (model, tensors) of one request, or none of them (QueueFull)."""
        with self._lock:
            if self._pending + len(items) > self.capacity:
                raise QueueFull(self.retry_after(len(items)))
            self._pending += len(items)
        works = [Work(key, tensors, deadline) for key, tensors in items]
        for work in works:
            self._queue.put(work)
        return works

    def retry_after(self, extra: int = 1) -> int:
        """Seconds until the queue has room for ``extra`` more, from the measured service time."""
        wait = (self._pending + extra - self.capacity) * self._service_seconds / len(self.runtimes)
        return max(1, math.ceil(wait))

    @property
    def pending(self) -> int:
        return self._pending

    def _serve(self, index: int, runtime: Runtime, work: Work) -> None:
        with self._lock:
            self._pending -= 1
        if work.cancelled:
            self.metrics.errors.labels("cancelled").inc()
            return  # the client went away: its input costs no NPU time
        now = time.monotonic()
        work.queued_seconds = now - work.enqueued
        self.metrics.stage("queue", work.queued_seconds)
        if now > work.deadline:
            self._finished(work, None, DeadlineExceeded(now - work.enqueued))
            return
        try:
            outputs = self._timed(index, runtime, work.key, work.tensors, work)
        except Exception as error:  # NpuFailure, or a bug: one input fails, serving goes on
            self._finished(work, None, error)
        else:
            self._finished(work, outputs, None)

    def _finished(
        self, work: Work, outputs: list[np.ndarray] | None, error: BaseException | None
    ) -> None:
        if (wake := work.finish(outputs, error)) is not None:
            self._wakes.put(wake)

    def _timed(
        self,
        index: int,
        runtime: Runtime,
        key: str,
        tensors: list[np.ndarray],
        work: Work | None = None,
    ) -> list[np.ndarray]:
        started = self._busy[index] = time.monotonic()
        try:
            return runtime.infer(key, tensors)
        finally:
            self._busy[index] = None
            seconds = time.monotonic() - started
            if work is not None:
                work.npu_seconds = seconds
            self.metrics.stage("npu", seconds)
            self.metrics.model_seconds(key, seconds)
            with self._lock:
                self._service_seconds = (
                    seconds
                    if not self._service_seconds
                    else 0.8 * self._service_seconds + 0.2 * seconds
                )


def golden_view(model: ServedModel, outputs: list[np.ndarray]) -> np.ndarray:
    """The part of a model's answer that must repeat, as one vector."""
    return flat_outputs(model.comparable(outputs))


def flat_outputs(outputs: list[np.ndarray]) -> np.ndarray:
    return np.concatenate([np.asarray(output, dtype=np.float64).ravel() for output in outputs])


def similarity(left: np.ndarray, right: np.ndarray) -> float:
    """Cosine similarity; equal answers (also all-zero ones) are 1."""
    return 1.0 if np.array_equal(left, right) else cosine(left, right)


def cosine(left: np.ndarray, right: np.ndarray) -> float:
    norms = float(np.linalg.norm(left) * np.linalg.norm(right))
    return float(np.dot(left, right) / norms) if norms else 0.0
