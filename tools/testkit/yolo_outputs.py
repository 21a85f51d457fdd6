"""YOLOv8 outputs made to order: ordinary scenes and the worst case for NMS."""

from __future__ import annotations

import numpy as np


def synthetic_output(
    objects: list[tuple[int, float, float, float, float, float]],
    candidates: int = 8400,
    noise: float = 0.05,
    seed: int = 0,
) -> np.ndarray:
    """An 84 x 8400 F16 output holding the given (class, score, cx, cy, w, h) objects, each
    repeated with jitter as YOLO's anchors do, plus low-score noise."""
    rng = np.random.default_rng(seed)
    output = np.zeros((84, candidates), dtype=np.float32)
    output[4:] = rng.uniform(0, noise, (80, candidates))
    output[:4] = rng.uniform(0, 640, (4, candidates))
    column = 0
    for class_id, score, cx, cy, w, h in objects:
        for _ in range(20):
            jitter = rng.normal(0, 2, 4)
            output[:4, column] = [cx + jitter[0], cy + jitter[1], w + jitter[2], h + jitter[3]]
            output[4 + class_id, column] = score - rng.uniform(0, 0.05)
            column += 1
    return output.astype(np.float16)


def every_anchor_output(seed: int = 0, low: float = 0.11) -> np.ndarray:
    """An 84 x 8400 F16 output in which every anchor passes a threshold of 0.1: scattered boxes
    of every size, each with one class above ``low`` (what a busy scene at Home Assistant's
    min_confidence looks like to NMS, at its worst)."""
    rng = np.random.default_rng(seed)
    output = np.zeros((84, 8400), dtype=np.float32)
    output[:2] = rng.uniform(0, 640, (2, 8400))
    output[2:4] = rng.uniform(4, 160, (2, 8400))
    output[4:] = rng.uniform(0, 0.09, (80, 8400))
    output[4 + rng.integers(0, 80, 8400), np.arange(8400)] = rng.uniform(low, 0.95, 8400)
    return output.astype(np.float16)
