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
    # each candidate's best score is its class's: read back from the comparable form
    confidences = best[candidates].view(prediction.dtype).astype(np.float32)
    centres = prediction[:4, candidates].astype(np.float32)  # rows cx, cy, w, h
    half = centres[2:] / 2
    corners = np.concatenate([centres[:2] - half, centres[:2] + half])  # rows x1, y1, x2, y2
    keep = _nms_rows(corners, confidences, class_ids, iou, max_detections)
    # Back to the original picture, in float32 as the boxes are, then to Python numbers at once.
    shift = np.array([[box.pad_x], [box.pad_y]] * 2, dtype=np.float32)
    limits = np.array([[box.width], [box.height]] * 2, dtype=np.float32)
    mapped = np.minimum(np.maximum((corners[:, keep] - shift) / np.float32(box.ratio), 0), limits)
    return [
        Detection(COCO_CLASSES[class_id], class_id, score, (x1, y1, x2, y2))
        for class_id, score, (x1, y1, x2, y2) in zip(
            class_ids[keep].tolist(), confidences[keep].tolist(), mapped.T.tolist(), strict=True
        )
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
    """Indices kept by class-wise greedy NMS, best score first, at most ``limit``; boxes are
    rows of x1, y1, x2, y2."""
    return _nms_rows(boxes.T, scores, class_ids, threshold, limit)  # _nms_rows gathers anyway


def _nms_rows(
    corners: np.ndarray,
    scores: np.ndarray,
    class_ids: np.ndarray,
    threshold: float,
    limit: int | None = None,
) -> np.ndarray:
    """nms() of boxes given as four rows (x1, y1, x2, y2), the layout its work wants.

    Boxes of different classes are moved apart by a class-dependent offset, so one greedy
    pass over all classes never suppresses across classes. The candidates are taken in blocks
    of the best remaining ones: within a block, the boxes' overlaps are computed at once and the
    greedy choice runs over bit masks; the boxes a block keeps then strike out every later
    candidate they overlap. The result is greedy NMS's, in a number of numpy calls that grows
    with the blocks needed, not with the boxes.
    """
    order = np.argsort(-scores, kind="stable")
    # Rows x1, y1, x2, y2, threshold * area: each a contiguous vector, so the pairwise
    # comparisons broadcast contiguous vectors. In float64: with the class offsets, float32
    # would round the coordinates to a sixteenth of a pixel.
    ranked = np.empty((5, order.size), dtype=np.float64)
    np.add(corners[:, order], class_ids[order] * 8192.0, out=ranked[:4])
    sides = np.maximum(ranked[2:4] - ranked[:2], 0)
    np.multiply(sides[0], sides[1], out=ranked[4])
    ranked[4] *= threshold
    wanted = order.size if limit is None else limit
    pending = np.arange(order.size)  # candidates not yet struck out nor in a block, in order
    keep: list[np.ndarray] = []
    kept = 0
    while pending.size and kept < wanted:
        block, pending = pending[:BLOCK], pending[BLOCK:]
        boxes_in_block = ranked[:, block]
        overlapping = _overlaps(boxes_in_block, boxes_in_block, threshold)
        chosen = _greedy(overlapping & _LATER[: block.size, : block.size], wanted - kept)
        keep.append(block[chosen])
        kept += len(chosen)
        if kept < wanted and pending.size:
            struck = _overlaps(boxes_in_block[:, chosen], ranked[:, pending], threshold)
            pending = pending[~struck.any(axis=0)]
    return order[np.concatenate(keep)] if keep else np.empty(0, dtype=np.intp)


def _overlaps(rows: np.ndarray, columns: np.ndarray, threshold: float) -> np.ndarray:
    """rows x columns (each a (5, n) array: x1, y1, x2, y2, threshold * area): does the IoU of
    each pair exceed the threshold?"""
    x1, y1, x2, y2, scaled_area = rows[:, :, None]  # views: broadcasting does the rest
    width = np.minimum(x2, columns[2])
    width -= np.maximum(x1, columns[0])
    height = np.minimum(y2, columns[3])
    height -= np.maximum(y1, columns[1])
    np.maximum(width, 0, out=width)  # a ufunc: clip() costs more here
    np.maximum(height, 0, out=height)
    width *= height  # the intersection
    # inter / union > t  <=>  (1 + t) * inter > t * area_a + t * area_b, without dividing (a
    # zero union is then no overlap)
    width *= 1 + threshold
    return width > scaled_area + columns[4]


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
