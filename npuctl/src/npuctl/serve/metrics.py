"""/metrics in Prometheus's text format, with the names and labels Prometheus users expect:
counters end in _total, durations are histograms in seconds, no per-request label values."""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.metrics_core import HistogramMetricFamily, Metric
from prometheus_client.utils import floatToGoString

# From 50 µs (tokenizing a short text) to 10 s (an inference that times out).
_BUCKETS = (
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
    0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip

STAGES = ("queue", "decode", "preprocess", "npu", "serialize")
ERROR_KINDS = (
    "invalid_request",
    "model_not_found",
    "too_large",
    "queue_full",
    "deadline",
    "npu_timeout",
    "npu_error",
    "cancelled",
    "slow_client",
    "busy",
    "loading",
    "unauthorized",
    "internal",
)
CONTENT_TYPE = CONTENT_TYPE_LATEST


class Histogram:
    """A histogram of durations by label values, read when scraped. Every request observes
    several: one lock and a binary search each, where prometheus_client's Histogram takes a
    lock per bucket it counts and walks the buckets in Python."""

    def __init__(self, name: str, documentation: str, labels: tuple[str, ...] = ()) -> None:
        self.name = name
        self.documentation = documentation
        self.labels = labels
        self._series: dict[tuple[str, ...], list[float]] = {}  # per bucket, then the sum
        self._lock = threading.Lock()

    def child(self, *values: str) -> Observer:
        """The series of these label values, shown from now on even before it is observed."""
        with self._lock:
            counts = self._series.setdefault(values, [0.0] * (len(_BUCKETS) + 2))
        return Observer(counts, self._lock)

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labels)
        with self._lock:
            series = {values: list(counts) for values, counts in self._series.items()}
        for values, counts in series.items():
            cumulative, buckets = 0.0, []
            for bound, count in zip((*_BUCKETS, float("inf")), counts[:-1], strict=True):
                cumulative += count
                buckets.append((floatToGoString(bound), cumulative))
            family.add_metric(list(values), buckets, counts[-1])
        yield family


class Observer:
    """One series of a Histogram."""

    __slots__ = ("_counts", "_lock")

    def __init__(self, counts: list[float], lock: threading.Lock) -> None:
        self._counts = counts
        self._lock = lock

    def observe(self, seconds: float) -> None:
        index = bisect.bisect_left(_BUCKETS, seconds)  # the first bucket whose bound holds it
        with self._lock:
            self._counts[index] += 1
            self._counts[-1] += seconds


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        registry = self.registry
        self.requests = Counter(
            "npuctl_serve_requests",
            "HTTP requests answered, by endpoint and status code.",
            ["endpoint", "code"],
            registry=registry,
        )
        self.errors = Counter(
            "npuctl_serve_errors",
            "Requests or inputs that failed, by kind.",
            ["kind"],
            registry=registry,
        )
        for kind in ERROR_KINDS:
            self.errors.labels(kind)
        self.inputs = Counter(
            "npuctl_serve_inputs", "Inputs embedded, by modality.", ["modality"], registry=registry
        )
        self._inputs = {modality: self.inputs.labels(modality) for modality in ("text", "image")}
        self.tokens = Counter(
            "npuctl_serve_prompt_tokens", "Tokens of the texts embedded.", registry=registry
        )
        self.queue_depth = Gauge(
            "npuctl_serve_queue_depth", "Inputs waiting for the NPU.", registry=registry
        )
        self.ready = Gauge(
            "npuctl_serve_ready", "1 when the last readiness check passed.", registry=registry
        )
        self.memory = Gauge(
            "npuctl_serve_memory_budget_bytes",
            "The memory budget: the limit planned for, what the warm models hold, one decode "
            "slot, and the request bodies held at once.",
            ["part"],
            registry=registry,
        )
        self.decode_slots = Gauge(
            "npuctl_serve_decode_slots", "Pictures decoded at once, at most.", registry=registry
        )
        self.job_reuse = Gauge(
            "npuctl_serve_job_reuse",
            "1 when one NPU job serves input after input (probed at start).",
            ["model"],
            registry=registry,
        )
        self.stages = Histogram(
            "npuctl_serve_stage_duration_seconds",
            "Time per input in each stage: queue wait, image decode, tokenize/preprocess, NPU, "
            "post-process and serialize.",
            ("stage",),
        )
        self._stage = {stage: self.stages.child(stage) for stage in STAGES}
        self.model_durations = Histogram(
            "npuctl_serve_model_duration_seconds",
            "Time of one inference on the NPU, by model.",
            ("model",),
        )
        self._model: dict[str, Observer] = {}
        self.model_requests = Counter(
            "npuctl_serve_model_requests",
            "Inputs answered, by model and outcome (ok or the error kind).",
            ["model", "outcome"],
            registry=registry,
        )
        self._model_answered: dict[tuple[str, str], Any] = {}
        self._answered: dict[tuple[str, int], Any] = {}
        self.request_durations = Histogram(
            "npuctl_serve_request_duration_seconds",
            "Time from a request's complete arrival to its answer.",
        )
        self.request_seconds = self.request_durations.child()
        for histogram in (self.stages, self.model_durations, self.request_durations):
            registry.register(histogram)

    def planned(self, limit: int, warm: int, per_decode: int, bodies: int, decodes: int) -> None:
        """The memory budget, as planned at start and again once the models are warm."""
        for part, value in (
            ("limit", limit),
            ("warm", warm),
            ("decode_slot", per_decode),
            ("bodies", bodies),
        ):
            self.memory.labels(part).set(value)
        self.decode_slots.set(decodes)

    def answered(self, endpoint: str, status: int, seconds: float) -> None:
        key = (endpoint, status)
        counter = self._answered.get(key)
        if counter is None:  # labels() costs a lock and a validation per call: once is enough
            counter = self._answered[key] = self.requests.labels(endpoint, str(status))
        counter.inc()
        self.request_seconds.observe(seconds)

    def stage(self, name: str, seconds: float) -> None:
        self._stage[name].observe(seconds)

    def model_seconds(self, model: str, seconds: float) -> None:
        histogram = self._model.get(model)
        if histogram is None:
            histogram = self._model[model] = self.model_durations.child(model)
        histogram.observe(seconds)

    def model_answered(self, model: str, outcome: str) -> None:
        key = (model, outcome)
        counter = self._model_answered.get(key)
        if counter is None:
            counter = self._model_answered[key] = self.model_requests.labels(model, outcome)
        counter.inc()

    def input(self, modality: str) -> None:
        self._inputs[modality].inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
