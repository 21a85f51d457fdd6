"""The vision pipeline every protocol shares: a picture (decoded within the memory budget) or
a frame already at the model's size becomes the model's tensors, goes through the NPU, and
comes back as detections or classes. DeepStack's routes and Frigate's ZeroMQ detector answer
from the same steps (one detector pipeline, two protocols)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import numpy as np

from .models import Classifier, Detector, ServedModel

if TYPE_CHECKING:
    from ..vision import Detection
    from .owner import Work
    from .service import Service


@dataclass
class Prepared:
    """A picture's tensors for a model, what maps its boxes back, and what it cost."""

    tensors: list[np.ndarray]
    context: object
    size: tuple[int, int]  # the picture's width and height
    decode_seconds: float = 0.0
    decode_cpu: float = 0.0
    prepare_seconds: float = 0.0
    cpu: float = 0.0  # the request thread's CPU time apart from the decode


def picture(service: Service, model: ServedModel, data: bytes) -> Prepared:
    """An uploaded picture decoded and prepared for ``model`` (on a request thread)."""
    started, cpu_started = time.perf_counter(), time.thread_time()
    decoded = service.decode(data, "the image")
    decode_seconds = time.perf_counter() - started
    decode_cpu = time.thread_time() - cpu_started
    tensors, context = cast("Detector", model).prepare(decoded)
    size = decoded.size
    del decoded
    service.done_with(size)
    prepare_seconds = time.perf_counter() - started - decode_seconds
    metrics = service.metrics
    metrics.stage("decode", decode_seconds)
    metrics.stage("preprocess", prepare_seconds)
    return Prepared(
        tensors,
        context,
        size,
        decode_seconds,
        decode_cpu,
        prepare_seconds,
        time.thread_time() - cpu_started - decode_cpu,
    )


def detections(
    service: Service,
    model: ServedModel,
    outputs: list[np.ndarray],
    context: object,
    min_confidence: float,
    limit: int,
) -> list[Detection]:
    """The model's detections of at least ``min_confidence``, best first, at most ``limit``."""
    started = time.perf_counter()
    found = cast("Detector", model).detections(outputs, context, min_confidence, limit)
    service.metrics.stage("serialize", time.perf_counter() - started)
    return found


def classes(model: ServedModel, outputs: list[np.ndarray], count: int) -> list[tuple[str, float]]:
    return cast("Classifier", model).classes(outputs, count)


def finished(service: Service, model: ServedModel, work: Work, after: float) -> None:
    """An answer of ``model`` went out ``after`` seconds past its NPU call."""
    service.answered(model, work, after)
