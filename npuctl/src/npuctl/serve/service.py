"""What every protocol of npuctl serve shares, and knows nothing of any protocol: the NPU
owners and their queue, the served models, the limits and the memory budget, the metrics,
readiness and the requests in flight (for draining).

Every request reaches the NPU one way: its inputs are queued (``submit``) and awaited on the
event loop (``wait``), which the NPU owner wakes when each is done; a client that leaves
cancels its request's task, and with it its inputs, which then cost no NPU time."""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from PIL import Image

from ..embedder import NpuFailure
from ..errors import InputError
from ..images import ImageFormatError, decode_rgb, give_back_memory
from . import auth
from .errors import ApiError
from .limits import Limits
from .memory import Budget, ByteBudget
from .metrics import Metrics
from .models import ServedModel, Serving
from .owner import GOLDEN_MIN_COSINE, NpuOwner, QueueFull, Work, golden_view, similarity

if TYPE_CHECKING:
    from ..models.manifest import FrigateFacts, Manifest

log = logging.getLogger("npuctl.serve")

# Pixels from which a decoded picture's memory is handed back at once (a 4K frame is 8.3 M).
LARGE_PICTURE = 4_000_000
# What the --public groups open by default.
PUBLIC_DEFAULT = frozenset({"health", "openapi"})


@dataclass
class ModelStatistics:
    """Per model: inferences answered and their time in the queue, on the NPU and after."""

    count: int = 0
    last: int = 0  # milliseconds since the epoch
    queue_ns: int = 0
    infer_ns: int = 0
    output_ns: int = 0


@dataclass
class Statistics:
    models: dict[str, ModelStatistics]
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, name: str, work: Work, after: float) -> None:
        stats = self.models.get(name)
        if stats is None:
            return
        with self.lock:
            stats.count += 1
            stats.last = int(time.time() * 1000)
            stats.queue_ns += int(work.queued_seconds * 1e9)
            stats.infer_ns += int(work.npu_seconds * 1e9)
            stats.output_ns += int(after * 1e9)

    def snapshot(self, names: list[str]) -> dict[str, ModelStatistics]:
        with self.lock:
            return {name: ModelStatistics(**vars(self.models[name])) for name in names}


class Service:
    """What every listener shares: the NPU owners, the served models, the limits, the
    metrics and the requests in flight (for draining)."""

    def __init__(
        self,
        serving: Serving,
        owner: NpuOwner,
        metrics: Metrics,
        limits: Limits,
        truncate: bool,
        platform: str = "npuctl",
        key: bytes | None = None,
        public: frozenset[str] = PUBLIC_DEFAULT,
        manifest: Manifest | None = None,
        runtime_folder: Path | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> None:
        self.serving = serving
        self.manifest = manifest  # the served models' entries (how Frigate uses them)
        self.runtime_folder = runtime_folder  # where the server tells the doctor things
        self.options = options or {}  # the command's, the protocols' own among them
        self.embedder = serving.embedder
        self.owner = owner
        self.metrics = metrics
        self.limits = limits
        self.model_names = self.embedder.model_names if self.embedder else ()
        self.truncate = truncate
        self.platform = platform
        self.key = key
        self.public = public
        self.created = int(time.time())
        self.loaded = threading.Event()
        self.draining = threading.Event()
        self.budget: Budget | None = None  # planned at start, again once the models are warm
        self.bodies = ByteBudget(0)
        self.stats = Statistics({name: ModelStatistics() for name in serving.models})
        self.loop: asyncio.AbstractEventLoop | None = None
        self._loaded_here: asyncio.Event | None = None
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._in_flight = 0
        self._decodes: threading.BoundedSemaphore | None = None
        self._ready_lock = asyncio.Lock()
        self._ready: tuple[float, bool, str] = (0.0, False, "not checked yet")

    # -- life cycle -----------------------------------------------------------------------
    def attach(self, loop: asyncio.AbstractEventLoop, budget: Budget) -> None:
        """The event loop the requests wait on (the NPU owners wake it), and the memory
        budget planned before the models load."""
        self.loop = loop
        self._loaded_here = asyncio.Event()
        self.budget = budget
        self.bodies = ByteBudget(budget.bodies)
        self._planned(budget)

    async def warm(self, budget: Budget) -> None:
        """The models are loaded and warm: the memory budget is planned with what they hold,
        and the requests that waited for them go on."""
        self.budget = budget
        self._decodes = threading.BoundedSemaphore(budget.decodes)
        await self.bodies.resize(budget.bodies)
        self._planned(budget)
        self.loaded.set()
        assert self._loaded_here is not None
        self._loaded_here.set()

    def _planned(self, budget: Budget) -> None:
        self.metrics.planned(
            budget.limit, budget.warm, budget.per_decode, budget.bodies, budget.decodes
        )

    def begin(self) -> None:
        with self._lock:
            self._in_flight += 1

    def end(self) -> None:
        with self._lock:
            self._in_flight -= 1
            if not self._in_flight:
                self._idle.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        with self._lock:
            return self._idle.wait_for(lambda: not self._in_flight, timeout)

    async def models_loaded(self) -> None:
        """Return once the models are loaded; a request that arrives while they load waits
        (as Immich's own server makes /predict wait for its model), at most --load-wait."""
        if self.loaded.is_set():
            return
        assert self._loaded_here is not None
        try:
            await asyncio.wait_for(self._loaded_here.wait(), self.limits.load_wait)
        except TimeoutError:
            raise ApiError(
                503,
                "the models are still loading",
                "loading",
                kind="loading",
                headers={"Retry-After": "5"},
            ) from None

    # -- who may call ---------------------------------------------------------------------
    def authorized(self, *offered: bytes | None) -> bool:
        """Whether any of the credentials offered is the key (a Bearer header and DeepStack's
        form field are alternatives: an empty field never outweighs a valid header)."""
        key = self.key
        return key is None or any(auth.matches(key, item) for item in offered if item)

    # -- health ---------------------------------------------------------------------------
    def healthy(self) -> tuple[bool, str]:
        """The process answers, and no NPU call has hung past the deadline."""
        busy_since = self.owner.busy_since
        if busy_since is not None and time.monotonic() - busy_since > self.limits.deadline:
            return False, (
                f"an NPU call has not returned for {time.monotonic() - busy_since:.0f} s "
                "(run 'npuctl doctor')"
            )
        return True, "ok"

    async def ready(self) -> tuple[bool, str]:
        """Every model's golden input gives its start-up answer again (recomputed through the
        queue at most every --ready-interval)."""
        if self.draining.is_set():
            return False, "shutting down"
        if not self.loaded.is_set():
            return False, "loading the models"
        async with self._ready_lock:
            checked, ok, reason = self._ready
            if time.monotonic() - checked < self.limits.ready_interval:
                return ok, reason
            ok, reason = await self._golden_agrees()
            if reason == "busy":
                return self._ready[1], self._ready[2]  # busy, not broken
            self._ready = (time.monotonic(), ok, reason)
            self.metrics.ready.set(1 if ok else 0)
            return ok, reason

    async def _golden_agrees(self) -> tuple[bool, str]:
        for name, model in list(self.serving.models.items()):
            try:
                outputs, _ = await self.infer(model.key, model.golden()[0])
            except ApiError as error:
                if error.status == 429:
                    return False, "busy"
                return False, f"{name}: the golden input failed: {error}"
            agreement = similarity(golden_view(model, outputs), self.owner.golden[name])
            if agreement < GOLDEN_MIN_COSINE:
                return False, (
                    f"{name}: the golden answer drifted (cosine {agreement:.4f} to the one "
                    "computed at start): run 'npuctl doctor'"
                )
        return True, "ready"

    # -- the NPU --------------------------------------------------------------------------
    def submit(self, items: list[tuple[str, list[np.ndarray]]]) -> list[Work]:
        """Queue every (model, tensors) of one request, or none (429 when the queue is full)."""
        try:
            return self.owner.submit(items, time.monotonic() + self.limits.deadline)
        except QueueFull as full:
            raise ApiError(
                429,
                f"the NPU's queue is full ({self.owner.capacity} inputs): {full}",
                "queue_full",
                kind="queue_full",
                headers={"Retry-After": str(full.retry_after)},
            ) from None

    async def wait(self, works: list[Work]) -> list[list[np.ndarray]]:
        """Each work's outputs, in order, awaited on the event loop: the NPU owner wakes it
        when one is done. A client that leaves cancels the task (and so its inputs); a call
        that has not returned by the deadline after its start ends the request with 504,
        while the call goes on."""
        loop = self.loop
        assert loop is not None
        results = []
        try:
            for work in works:
                done = loop.create_future()

                def settle(done: asyncio.Future[None] = done) -> None:
                    if not done.done():
                        done.set_result(None)

                def notify(settle: Callable[[], None] = settle) -> None:
                    loop.call_soon_threadsafe(settle)

                work.notify = notify
                if work.done:
                    settle()
                hung = work.deadline + self.limits.deadline
                # A plain timer settles it too: cheaper than a timeout's cancellation.
                timer = loop.call_at(loop.time() + hung - time.monotonic(), settle)
                await done
                timer.cancel()
                if not work.done:
                    raise self.hung(work)
                results.append(self.outputs(work))
        except BaseException:
            for work in works:
                work.cancelled = True
            raise
        return results

    async def infer(self, key: str, tensors: list[np.ndarray]) -> tuple[list[np.ndarray], Work]:
        """One input through the NPU: its outputs, and its work (with its timings)."""
        (work,) = works = self.submit([(key, tensors)])
        (outputs,) = await self.wait(works)
        return outputs, work

    def hung(self, work: Work) -> ApiError:
        """The answer to a request whose NPU call did not return in time."""
        self.metrics.model_answered(work.key, "npu_timeout")
        return ApiError(
            504,
            f"the NPU did not answer within {2 * self.limits.deadline:g} s",
            "npu_timeout",
            kind="npu_timeout",
        )

    def outputs(self, work: Work) -> list[np.ndarray]:
        """A finished work's outputs, or its failure as the answer."""
        try:
            outputs = work.result(0)
        except NpuFailure as failure:
            self.metrics.model_answered(work.key, failure.kind)
            raise ApiError(
                503, f"the NPU failed: {failure}", failure.kind, kind=failure.kind
            ) from None
        assert outputs is not None
        return outputs

    def answered(self, model: ServedModel, work: Work, after: float) -> None:
        """A model's answer went out ``after`` seconds past its NPU call."""
        self.metrics.model_answered(model.name, "ok")
        self.stats.record(model.name, work, after)

    # -- models ---------------------------------------------------------------------------
    def facts(self, name: str) -> FrigateFacts | None:
        """How Frigate's zmq detector uses a served model, as its manifest entry says."""
        entry = self.manifest.entries.get(name) if self.manifest else None
        return entry.frigate if entry else None

    def adopt(self, model: ServedModel, golden: list[np.ndarray]) -> None:
        """A model added while serving (an upload), with its first answer to its golden
        input: served from now on, and checked by /ready like the others."""
        self.owner.golden[model.name] = golden_view(model, golden)
        self.owner.models[model.name] = model
        self.stats.models.setdefault(model.name, ModelStatistics())
        self.serving.models[model.name] = model

    def model(self, name: str) -> ServedModel:
        model = self.serving.models.get(name)
        if model is None:
            raise ApiError(
                404,
                f"no model {name[:100]!r}; this server has {', '.join(self.serving.models)}",
                "model_not_found",
                kind="model_not_found",
            )
        return model

    def of_task(self, task: str) -> ServedModel:
        """The first served model of a task (404 when none is)."""
        candidates = self.serving.of_task(task)
        if not candidates:
            raise ApiError(
                404,
                f"this server has no {task} model: start it with one in --models "
                "(POST /v2/repository/index lists what it serves)",
                "model_not_found",
                kind="model_not_found",
            )
        return candidates[0]

    # -- pictures -------------------------------------------------------------------------
    def decode(self, data: bytes, what: str) -> Image.Image:
        """An uploaded picture as RGB (on a request thread): one of the formats served, its
        size checked from its header against what a decode slot holds for its format and
        mode before any pixel is decoded, and at most the budget's decodes at once."""
        budget, slots = self.budget, self._decodes
        assert budget is not None and slots is not None
        with slots:
            try:
                return decode_rgb(data, budget.pixels, what)
            except ImageFormatError as error:
                raise ApiError(415, str(error), "unsupported_media_type") from None
            except InputError as error:
                give_back_memory()
                raise ApiError(400, str(error), "invalid_image") from None

    @staticmethod
    def done_with(size: tuple[int, int]) -> None:
        """A decoded picture of this size is freed: a large one's memory goes back at once."""
        if size[0] * size[1] >= LARGE_PICTURE:
            give_back_memory()


def server_timing(**seconds: float) -> dict[str, str]:
    """The W3C Server-Timing header (milliseconds): browsers' and curl users' view of where a
    request's time went, and the benchmark's."""
    stages = ", ".join(f"{name};dur={value * 1000:.3f}" for name, value in seconds.items())
    return {"Server-Timing": stages}


def retry_seconds(seconds: float) -> str:
    return str(max(1, math.ceil(seconds)))
