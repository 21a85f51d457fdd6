"""SSD object detection (SSDLite MobileDet and other TensorFlow detection models): the picture
stretched to the input size, and the four outputs of the model's own TFLite_Detection_PostProcess
op (run by the interpreter on the CPU) turned into detections in the picture's pixels."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
from PIL import Image

from npuctl.errors import InputError, ModelError
from npuctl.vision import Detection, coco_by_category_index

from .classify import image_tensor
from .runtime import LiteModel, TensorSpec, image_input

# The post-processing op's outputs, as TensorFlow's exporter names them (":N" after the op).
OUTPUT_ORDER = ("boxes", "classes", "scores", "count")
_SUFFIX = re.compile(r":(\d+)$")


class SsdModel(LiteModel):
    """An SSD detector: an image in; boxes, classes, scores and a count out."""

    def _check(self) -> None:
        self.input = image_input(self.path, self.inputs)
        self.order = output_order(self.path, self.outputs)


def output_order(path: Path, outputs: list[TensorSpec]) -> list[int]:
    """Indices of boxes, classes, scores and count among the outputs. Exporters differ in the
    order; TensorFlow names them OP, OP:1, OP:2, OP:3 in the op's own order."""
    if len(outputs) != 4:
        raise ModelError(
            f"{path} has {len(outputs)} outputs; an SSD detector with its post-processing has "
            "4 (boxes, classes, scores, count)"
        )
    ranks = [int(m.group(1)) if (m := _SUFFIX.search(o.name)) else 0 for o in outputs]
    order = (
        sorted(range(4), key=lambda i: ranks[i]) if sorted(ranks) == [0, 1, 2, 3] else [0, 1, 2, 3]
    )
    boxes = outputs[order[0]]
    if boxes.shape[-1:] != (4,) or outputs[order[3]].dtype.kind != "f":
        raise ModelError(
            f"{path}: its outputs are not those of TFLite_Detection_PostProcess "
            "(boxes N x 4, classes, scores, count)"
        )
    return order


def read_labels(path: Path | None) -> tuple[str, ...]:
    """COCO's labels by category index (what TensorFlow's SSD models give), or one per line."""
    if path is None:
        return coco_by_category_index()
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise InputError(f"cannot read the labels {path}: {error}") from error
    labels = tuple(line.strip() for line in lines)
    if not any(labels):
        raise InputError(f"{path} has no labels: one label per line, in class order")
    return labels


def prepare(picture: Image.Image, spec: TensorSpec) -> np.ndarray:
    return image_tensor(picture, spec)


def found(outputs: list[np.ndarray], order: list[int]) -> list[np.ndarray]:
    """Boxes, classes, scores of the detections the count covers, and the count."""
    boxes, classes, scores, count = (np.asarray(outputs[i]).reshape(-1) for i in order)
    number = int(count[0]) if count.size and np.isfinite(count[0]) else 0
    number = max(0, min(number, scores.size, classes.size, boxes.size // 4))
    return [boxes[: number * 4], classes[:number], scores[:number], count[:1]]


def detections(
    outputs: list[np.ndarray],
    order: list[int],
    size: tuple[int, int],
    labels: tuple[str, ...],
    min_confidence: float,
) -> list[Detection]:
    """Detections of at least ``min_confidence``, best first, boxes in the picture's pixels
    (the model's boxes are normalised ymin, xmin, ymax, xmax)."""
    boxes, classes, scores, _ = found(outputs, order)
    boxes = boxes.reshape(-1, 4).astype(np.float64)
    width, height = size
    result = []
    for k in np.argsort(-scores, kind="stable"):
        score = float(scores[k])
        if not score >= min_confidence:  # NaN too
            continue
        class_id = int(classes[k])
        label = (
            labels[class_id] if 0 <= class_id < len(labels) and labels[class_id] else str(class_id)
        )
        ymin, xmin, ymax, xmax = np.clip(boxes[k], 0.0, 1.0)
        result.append(
            Detection(
                label, class_id, score, (xmin * width, ymin * height, xmax * width, ymax * height)
            )
        )
    return result
