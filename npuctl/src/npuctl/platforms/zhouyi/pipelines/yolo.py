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


MAX_CANDIDATES = 1024  # the best candidates that reach NMS (Ultralytics' max_nms)
BLOCK = 64  # candidates compared with each other at once in NMS
_LATER = np.triu(np.ones((BLOCK, BLOCK), dtype=bool), 1)  # row i: the boxes after box i


def decode(
    output: np.ndarray,
    box: Letterbox,
    *,
    conf: float = 0.25,
    iou: float = 0.45,
    max_detections: int = 300,
    max_candidates: int = MAX_CANDIDATES,
) -> list[Detection]:
    """Detections from the raw (84 x 8400) output, best first.

    Its cost is bounded by ``max_candidates`` and ``max_detections``, not by the scene: when
    every anchor passes a low threshold, only the best ``max_candidates`` are converted and
    compared, and NMS stops at ``max_detections``."""
    prediction = output.reshape(84, -1)
    best, threshold = _comparable_best_scores(prediction[4:], conf)
    candidates = np.flatnonzero(best > threshold)
    if candidates.size == 0:
        return []
    if candidates.size > max_candidates:
        ranked = np.argpartition(best[candidates], candidates.size - max_candidates)
        candidates = np.sort(candidates[ranked[candidates.size - max_candidates :]])
    scores = prediction[4:, candidates]
    class_ids = (scores.view(np.int16) if scores.dtype == np.float16 else scores).argmax(axis=0)
    confidences = scores[class_ids, np.arange(candidates.size)].astype(np.float32)
    cx, cy, w, h = prediction[:4, candidates].astype(np.float32)
    boxes = np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=1)
    keep = nms(boxes, confidences, class_ids, iou, limit=max_detections)
    boxes = boxes[keep]
    boxes[:, [0, 2]] = ((boxes[:, [0, 2]] - box.pad_x) / box.ratio).clip(0, box.width)
    boxes[:, [1, 3]] = ((boxes[:, [1, 3]] - box.pad_y) / box.ratio).clip(0, box.height)
    return [
        Detection(
            COCO_CLASSES[int(class_ids[k])],
            int(class_ids[k]),
            float(confidences[k]),
            (float(boxes[i][0]), float(boxes[i][1]), float(boxes[i][2]), float(boxes[i][3])),
        )
        for i, k in enumerate(keep)
    ]


def _comparable_best_scores(scores: np.ndarray, conf: float) -> tuple[np.ndarray, object]:
    """Per candidate its best class score, and the threshold, in a form that orders as the
    scores do. Float16 scores are read as int16 bit patterns, which order non-negative halves
    exactly as their values (and negative ones below them): numpy's float16 arithmetic is
    emulated and many times slower."""
    if scores.dtype != np.float16:
        return scores.max(axis=0), conf
    threshold = np.float16(conf)
    if float(threshold) > conf:  # the largest half <= conf: v > conf <=> v > threshold
        threshold = np.nextafter(threshold, np.float16(-np.inf))
    return scores.view(np.int16).max(axis=0), threshold.view(np.int16)


def nms(
    boxes: np.ndarray,
    scores: np.ndarray,
    class_ids: np.ndarray,
    threshold: float,
    limit: int | None = None,
) -> np.ndarray:
    """Indices kept by class-wise greedy NMS, best score first, at most ``limit``.

    Boxes of different classes are moved apart by a class-dependent offset, so one greedy
    pass over all classes never suppresses across classes. The candidates are taken in blocks
    of the best remaining ones: within a block, the boxes' overlaps are computed at once and the
    greedy choice runs over bit masks; the boxes a block keeps then strike out every later
    candidate they overlap. The result is greedy NMS's, in a number of numpy calls that grows
    with the blocks needed, not with the boxes.
    """
    order = np.argsort(-scores, kind="stable")
    shifted = boxes[order] + (class_ids[order] * 8192.0)[:, None]
    area = np.maximum(shifted[:, 2] - shifted[:, 0], 0) * np.maximum(
        shifted[:, 3] - shifted[:, 1], 0
    )
    corners = np.column_stack([shifted, area])  # one gather fetches a box's five values
    wanted = len(order) if limit is None else limit
    alive = np.ones(len(order), dtype=bool)
    keep: list[np.ndarray] = []
    kept = 0
    start = 0
    while start < len(order) and kept < wanted:
        stop = start + BLOCK
        block = np.flatnonzero(alive[start:stop]) + start
        start = stop
        if block.size == 0:
            continue
        boxes_in_block = corners[block]
        overlapping = _overlaps(boxes_in_block, boxes_in_block, threshold)
        chosen = _greedy(overlapping & _LATER[: block.size, : block.size], wanted - kept)
        winners = block[chosen]
        keep.append(winners)
        kept += winners.size
        if kept < wanted and start < len(order):
            later = np.flatnonzero(alive[start:]) + start
            struck = _overlaps(boxes_in_block[chosen], corners[later], threshold).any(axis=0)
            alive[later[struck]] = False
    return order[np.concatenate(keep)] if keep else np.empty(0, dtype=np.intp)


def _overlaps(rows: np.ndarray, columns: np.ndarray, threshold: float) -> np.ndarray:
    """rows x columns (each x1, y1, x2, y2, area): does the IoU of each pair exceed it?"""
    row = rows[:, :, None]  # views: broadcasting does the rest
    width = np.minimum(row[:, 2], columns[:, 2]) - np.maximum(row[:, 0], columns[:, 0])
    height = np.minimum(row[:, 3], columns[:, 3]) - np.maximum(row[:, 1], columns[:, 1])
    inter = np.maximum(width, 0) * np.maximum(height, 0)  # a ufunc: clip() costs more here
    # inter / union > t, without dividing (a zero union is then no overlap)
    return inter > threshold * (row[:, 4] + columns[:, 4] - inter)


def _greedy(suppresses: np.ndarray, wanted: int) -> list[int]:
    """Greedy choice over a block: row i marks the later boxes box i suppresses."""
    rows = np.packbits(suppresses, axis=1, bitorder="little")
    width = rows.shape[1]
    packed = rows.tobytes()
    struck = 0
    chosen: list[int] = []
    for i in range(suppresses.shape[0]):
        if struck >> i & 1:
            continue
        chosen.append(i)
        if len(chosen) == wanted:
            break
        struck |= int.from_bytes(packed[i * width : (i + 1) * width], "little")
    return chosen
