"""The one thread that owns the NPU. The vendor runtimes are not thread-safe, so every call
into them happens here; requests wait in a bounded queue, each with a deadline, and tensors
are prepared and vectors encoded by the request threads, so the NPU never waits for them."""

from __future__ import annotations

import _thread
import math
import queue
import threading
import time

import numpy as np

from ..embedder import Embedder, JobReuse, NpuFailure, Prepared
from ..errors import NpuctlError
from .metrics import Metrics

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

    __slots__ = ("_done", "cancelled", "deadline", "enqueued", "error", "prepared", "vector")

    def __init__(self, prepared: Prepared, deadline: float) -> None:
        self.prepared = prepared
        self.deadline = deadline
        self.enqueued = time.monotonic()
        self._done = _thread.allocate_lock()
        self._done.acquire()  # released once, by finish()
        self.vector: np.ndarray | None = None
        self.error: BaseException | None = None
        self.cancelled = False  # the client left: skip it

    def finish(self, vector: np.ndarray | None, error: BaseException | None = None) -> None:
        self.vector, self.error = vector, error
        self._done.release()

    def result(self, timeout: float) -> np.ndarray | None:
        """The vector; None while not done after ``timeout``; raises the inference's error."""
        if not self._done.acquire(timeout=timeout):
            return None
        self._done.release()  # done stays done for the next caller
        if self.error is not None:
            raise self.error
        return self.vector


class NpuOwner:
    def __init__(self, embedder: Embedder, capacity: int, metrics: Metrics) -> None:
        self.embedder = embedder
        self.capacity = capacity
        self.metrics = metrics
        self.reuse = JobReuse()
        self.golden: np.ndarray | None = None
        self.busy_since: float | None = None  # when the NPU call in progress started
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._pending = 0
        self._lock = threading.Lock()
        self._service_seconds = 0.0  # moving average of one NPU call
        self._started = threading.Event()
        self._start_error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="npu-owner", daemon=True)
        metrics.queue_depth.set_function(lambda: self._pending)  # read when scraped

    # -- life cycle -----------------------------------------------------------------------
    def start(self) -> None:
        """Load, probe and warm up on the owner thread; raise what went wrong there."""
        self._thread.start()
        self._started.wait()
        if self._start_error is not None:
            self._thread.join()
            raise self._start_error

    def stop(self) -> None:
        """Finish what is queued, then release the NPU."""
        self._queue.put(_STOP)
        self._thread.join()

    def _run(self) -> None:
        try:
            self.reuse = self.embedder.start()
            self.golden = self._warm_up()
        except BaseException as error:  # handed to start(), which raises it in the caller
            self._start_error = error
            self._started.set()
            return
        self._started.set()
        try:
            while (work := self._queue.get()) is not _STOP:
                self._serve(work)
        finally:
            self.embedder.stop()

    def _warm_up(self) -> np.ndarray:
        first, second = self.embedder.golden_inputs()
        golden = self._timed(first)
        again = self._timed(first)
        other = self._timed(second)
        if not np.all(np.isfinite(golden)):
            raise NpuctlError("the NPU's warm-up embedding is not finite: run 'npuctl doctor'")
        if cosine(golden, again) < GOLDEN_MIN_COSINE:
            raise NpuctlError(
                "the NPU gives different embeddings for the same input: run 'npuctl doctor'"
            )
        if cosine(golden, other) >= GOLDEN_MIN_COSINE:
            raise NpuctlError(
                "the NPU gives the same embedding for different inputs: run 'npuctl doctor'"
            )
        return golden

    # -- the queue ------------------------------------------------------------------------
    def submit(self, items: list[Prepared], deadline: float) -> list[Work]:
        """Queue every item of one request, or none of them (QueueFull)."""
        with self._lock:
            if self._pending + len(items) > self.capacity:
                raise QueueFull(self.retry_after(len(items)))
            self._pending += len(items)
        works = [Work(item, deadline) for item in items]
        for work in works:
            self._queue.put(work)
        return works

    def retry_after(self, extra: int = 1) -> int:
        """Seconds until the queue has room for ``extra`` more, from the measured service time."""
        wait = (self._pending + extra - self.capacity) * self._service_seconds
        return max(1, math.ceil(wait))

    @property
    def pending(self) -> int:
        return self._pending

    def _serve(self, work: Work) -> None:
        with self._lock:
            self._pending -= 1
        if work.cancelled:
            self.metrics.errors.labels("cancelled").inc()
            return  # the client went away: its input costs no NPU time
        now = time.monotonic()
        self.metrics.stage("queue", now - work.enqueued)
        if now > work.deadline:
            work.finish(None, DeadlineExceeded(now - work.enqueued))
            return
        try:
            work.finish(self._timed(work.prepared))
        except Exception as error:  # NpuFailure, or a bug: one input fails, serving goes on
            work.finish(None, error)

    def _timed(self, prepared: Prepared) -> np.ndarray:
        started = self.busy_since = time.monotonic()
        try:
            return self.embedder.embed(prepared)
        finally:
            self.busy_since = None
            seconds = time.monotonic() - started
            self.metrics.stage("npu", seconds)
            self._service_seconds = (
                seconds
                if not self._service_seconds
                else 0.8 * self._service_seconds + 0.2 * seconds
            )


def cosine(left: np.ndarray, right: np.ndarray) -> float:
    norms = float(np.linalg.norm(left) * np.linalg.norm(right))
    return float(np.dot(left, right) / norms) if norms else 0.0
