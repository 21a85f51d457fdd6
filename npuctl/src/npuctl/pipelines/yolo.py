"""YOLOv8 pre- and post-processing: letterbox to 640x640 (BGR, channels first, grey 114
padding), decoding of the 84x8400 output (cx, cy, w, h in input pixels + 80 class scores),
class-wise non-maximum suppression, boxes mapped back to the original image."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from PIL import Image

SIZE = 640
PAD_VALUE = 114
COCO_CLASSES = (
    "person",
    "bicycle",
    "car",
    "motorcycle",
    "airplane",
    "bus",
    "train",
    "truck",
    "boat",
    "traffic light",
    "fire hydrant",
    "stop sign",
    "parking meter",
    "bench",
    "bird",
    "cat",
    "dog",
    "horse",
    "sheep",
    "cow",
    "elephant",
    "bear",
    "zebra",
    "giraffe",
    "backpack",
    "umbrella",
    "handbag",
    "tie",
    "suitcase",
    "frisbee",
    "skis",
    "snowboard",
    "sports ball",
    "kite",
    "baseball bat",
    "baseball glove",
    "skateboard",
    "surfboard",
    "tennis racket",
    "bottle",
    "wine glass",
    "cup",
    "fork",
    "knife",
    "spoon",
    "bowl",
    "banana",
    "apple",
    "sandwich",
    "orange",
    "broccoli",
    "carrot",
    "hot dog",
    "pizza",
    "donut",
    "cake",
    "chair",
    "couch",
    "potted plant",
    "bed",
    "dining table",
    "toilet",
    "tv",
    "laptop",
    "mouse",
    "remote",
    "keyboard",
    "cell phone",
    "microwave",
    "oven",
    "toaster",
    "sink",
    "refrigerator",
    "book",
    "clock",
    "vase",
    "scissors",
    "teddy bear",
    "hair drier",
    "toothbrush",
)


@dataclass(frozen=True)
class Letterbox:
    ratio: float
    pad_x: float
    pad_y: float
    width: int  # original image
    height: int


@dataclass(frozen=True)
class Detection:
    label: str
    class_id: int
    score: float
    box: tuple[float, float, float, float]  # x1, y1, x2, y2 in original pixels

    def as_dict(self) -> dict[str, object]:
        return {
            "label": self.label,
            "class_id": self.class_id,
            "score": round(self.score, 4),
            "box": [round(v, 1) for v in self.box],
        }


def letterbox(image: Image.Image, size: int = SIZE) -> tuple[np.ndarray, Letterbox]:
    """float32 (3, size, size) in [0, 1], BGR; quantize it with the input descriptor."""
    rgb = image.convert("RGB")
    width, height = rgb.size
    ratio = min(size / width, size / height)
    new_width, new_height = round(width * ratio), round(height * ratio)
    pad_x, pad_y = (size - new_width) / 2, (size - new_height) / 2
    canvas = np.full((size, size, 3), PAD_VALUE, dtype=np.uint8)
    left, top = round(pad_x - 0.1), round(pad_y - 0.1)
    resized = rgb.resize((new_width, new_height), Image.Resampling.BILINEAR)
    canvas[top : top + new_height, left : left + new_width] = np.asarray(resized)
    chw_bgr = canvas[:, :, ::-1].transpose(2, 0, 1)
    tensor = np.ascontiguousarray(chw_bgr, dtype=np.float32) * np.float32(1 / 255)
    return tensor, Letterbox(ratio, left, top, width, height)


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
    scores = prediction[4:]
    best = scores.max(axis=0)
    candidates = np.flatnonzero(best > conf)
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


def nms(
    boxes: np.ndarray, scores: np.ndarray, class_ids: np.ndarray, threshold: float
) -> np.ndarray:
    """Indices kept by class-wise greedy NMS, best score first.

    Boxes of different classes are moved apart by a class-dependent offset, so one pass
    over all classes never suppresses across classes; the pairwise IoU matrix of the few
    hundred candidates is computed at once instead of box by box.
    """
    order = np.argsort(-scores, kind="stable")
    shifted = boxes[order] + (class_ids[order] * 8192.0)[:, None]
    x1, y1, x2, y2 = shifted.T
    area = (x2 - x1).clip(0) * (y2 - y1).clip(0)
    inter_w = (np.minimum(x2[:, None], x2[None]) - np.maximum(x1[:, None], x1[None])).clip(0)
    inter_h = (np.minimum(y2[:, None], y2[None]) - np.maximum(y1[:, None], y1[None])).clip(0)
    inter = inter_w * inter_h
    with np.errstate(divide="ignore", invalid="ignore"):
        overlap = inter / (area[:, None] + area[None] - inter)
    suppress = np.triu(overlap > threshold, k=1)
    keep = np.ones(len(order), dtype=bool)
    for i in range(len(order)):
        if keep[i]:
            keep &= ~suppress[i]
    return order[keep]
