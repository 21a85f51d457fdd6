"""YOLOv8 pre- and post-processing: letterbox to 640x640 (BGR, channels first, grey 114
padding), decoding of the 84x8400 output (cx, cy, w, h in input pixels + 80 class scores),
class-wise non-maximum suppression, boxes mapped back to the original image."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from PIL import Image

from npuctl.vision import COCO_CLASSES, Detection

SIZE = 640
PAD_VALUE = 114


@dataclass(frozen=True)
class Letterbox:
    ratio: float
    pad_x: float
    pad_y: float
    width: int  # original image
    height: int


def letterbox(image: Image.Image, size: int = SIZE) -> tuple[np.ndarray, Letterbox]:
    """float32 (3, size, size) in [0, 1], BGR; quantize it with the input descriptor."""
    pixels, box = letterbox_pixels(image, size)
    return pixels.astype(np.float32) * np.float32(1 / 255), box


def letterbox_pixels(image: Image.Image, size: int = SIZE) -> tuple[np.ndarray, Letterbox]:
    """uint8 (3, size, size), BGR: what an input quantized with scale 255 takes as it is.

    Pillow resizes, pads and packs each plane straight from its pixels (a frame at the model's
    size skips the first two): a third of numpy's channel transpose."""
    rgb = image if image.mode == "RGB" else image.convert("RGB")
    width, height = rgb.size
    ratio = min(size / width, size / height)
    new_width, new_height = round(width * ratio), round(height * ratio)
    pad_x, pad_y = (size - new_width) / 2, (size - new_height) / 2
    left, top = round(pad_x - 0.1), round(pad_y - 0.1)
    if (new_width, new_height) != (width, height):
        rgb = rgb.resize((new_width, new_height), Image.Resampling.BILINEAR)
    if (new_width, new_height) != (size, size):
        canvas = Image.new("RGB", (size, size), (PAD_VALUE,) * 3)
        canvas.paste(rgb, (left, top))
        rgb = canvas
    planes = b"".join(rgb.tobytes("raw", band) for band in "BGR")
    chw_bgr = np.frombuffer(planes, dtype=np.uint8).reshape(3, size, size)
    return chw_bgr, Letterbox(ratio, left, top, width, height)


def decode(
    output: np.ndarray,
    box: Letterbox,
    *,
    conf: float = 0.25,
    iou: float = 0.45,
    max_detections: int = 300,
) -> list[Detection]:
    """Detections from the raw (84 x 8400) output, best first."""
    prediction = output.reshape(84, -1)
    candidates = np.flatnonzero(_best_scores_above(prediction[4:], conf))
    if candidates.size == 0:
        return []
    selected = prediction[:, candidates].astype(np.float32)
    class_ids = selected[4:].argmax(axis=0)
    confidences = selected[4:][class_ids, np.arange(candidates.size)]
    cx, cy, w, h = selected[0], selected[1], selected[2], selected[3]
    boxes = np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=1)
    keep = nms(boxes, confidences, class_ids, iou)[:max_detections]
    boxes = boxes[keep]
    boxes[:, [0, 2]] = ((boxes[:, [0, 2]] - box.pad_x) / box.ratio).clip(0, box.width)
    boxes[:, [1, 3]] = ((boxes[:, [1, 3]] - box.pad_y) / box.ratio).clip(0, box.height)
    return [
        Detection(
            COCO_CLASSES[int(class_ids[k])],
            int(class_ids[k]),
            float(confidences[k]),
            tuple(float(v) for v in boxes[i]),
        )
        for i, k in enumerate(keep)
    ]


def _best_scores_above(scores: np.ndarray, conf: float) -> np.ndarray:
    """Per candidate: is its best class score > conf? For float16 scores, compared as int16
    bit patterns, which order non-negative halves exactly as their values (and negative ones
    below them): numpy's float16 arithmetic is emulated and many times slower."""
    if scores.dtype != np.float16:
        return scores.max(axis=0) > conf
    threshold = np.float16(conf)
    if float(threshold) > conf:  # the largest half <= conf: v > conf <=> v > threshold
        threshold = np.nextafter(threshold, np.float16(-np.inf))
    best = scores.view(np.int16).max(axis=0)
    return best > threshold.view(np.int16)


def nms(
    boxes: np.ndarray, scores: np.ndarray, class_ids: np.ndarray, threshold: float
) -> np.ndarray:
    """Indices kept by class-wise greedy NMS, best score first.

    Boxes of different classes are moved apart by a class-dependent offset, so one greedy
    pass over all classes never suppresses across classes, and each step compares the best
    remaining box with all the others at once.
    """
    order = np.argsort(-scores, kind="stable")
    shifted = boxes[order] + (class_ids[order] * 8192.0)[:, None]
    x1, y1, x2, y2 = (np.ascontiguousarray(column) for column in shifted.T)
    area = (x2 - x1).clip(0) * (y2 - y1).clip(0)
    alive = np.ones(len(order), dtype=bool)
    keep = []
    while alive.any():
        best = int(alive.argmax())  # the best remaining box (scores are sorted)
        keep.append(best)
        inter = (np.minimum(x2[best], x2) - np.maximum(x1[best], x1)).clip(0) * (
            np.minimum(y2[best], y2) - np.maximum(y1[best], y1)
        ).clip(0)
        with np.errstate(divide="ignore", invalid="ignore"):
            alive &= ~(inter / (area[best] + area - inter) > threshold)
        alive[best] = False
    return order[np.array(keep, dtype=np.intp)]
