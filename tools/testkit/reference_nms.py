"""A straightforward class-wise NMS: the baseline the fast one is checked and timed against."""

from __future__ import annotations

import numpy as np


def straightforward_nms(
    boxes: np.ndarray, scores: np.ndarray, class_ids: np.ndarray, threshold: float
) -> list[int]:
    keep = []
    for class_id in np.unique(class_ids):
        indices = np.flatnonzero(class_ids == class_id)
        indices = indices[np.argsort(-scores[indices], kind="stable")]
        while indices.size:
            best = indices[0]
            keep.append(int(best))
            rest = indices[1:]
            x1 = np.maximum(boxes[best, 0], boxes[rest, 0])
            y1 = np.maximum(boxes[best, 1], boxes[rest, 1])
            x2 = np.minimum(boxes[best, 2], boxes[rest, 2])
            y2 = np.minimum(boxes[best, 3], boxes[rest, 3])
            inter = np.clip(x2 - x1, 0, None) * np.clip(y2 - y1, 0, None)
            area = lambda b: (b[..., 2] - b[..., 0]) * (b[..., 3] - b[..., 1])  # noqa: E731
            overlap = inter / (area(boxes[best]) + area(boxes[rest]) - inter)
            indices = rest[overlap <= threshold]
    return keep
