"""Object detection as every family reports it: COCO's label names, a detection in the
original image's pixels, and a copy of the image with the boxes drawn."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from .errors import InputError
from .files import check_writable_file, write_atomically

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

# COCO's category ids run 1..90 with ten ids unused; SSD models trained with TensorFlow's
# object detection API number their classes by category id - 1.
# The category ids COCO's 2017 detection set left unused, by the names of the 2014 paper's 91
# categories; SSD models trained on it can still emit them, and Frigate's label map names them.
COCO_UNUSED = {
    12: "street sign", 26: "hat", 29: "shoe", 30: "eye glasses", 45: "plate", 66: "mirror",
    68: "window", 69: "desk", 71: "door", 83: "blender",
}  # fmt: skip
COCO_UNUSED_IDS = tuple(COCO_UNUSED)


def coco_by_category_index() -> tuple[str, ...]:
    """Labels indexed by category id - 1: every id named (no bare numbers in an answer)."""
    names = iter(COCO_CLASSES)
    return tuple(COCO_UNUSED.get(cid) or next(names) for cid in range(1, 91))


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


def golden_picture(seed: int) -> Image.Image:
    """A fixed picture (gradients and a disc placed by ``seed``): the same pixels on every
    start, for the golden inputs of vision models."""
    ramp = np.linspace(0, 255, 256, dtype=np.float32)
    red = np.add.outer(ramp, ramp) / 2
    blue = np.abs(np.subtract.outer(ramp, ramp))
    yy, xx = np.mgrid[:256, :256]
    disc = ((yy - 96 - seed * 40) ** 2 + (xx - 128) ** 2 < 60**2) * 255.0
    pixels = np.stack([red, disc, blue], axis=-1).astype(np.uint8)
    return Image.fromarray(pixels, "RGB")


def check_annotate_target(target: Path) -> None:
    problem = check_writable_file(target, "--annotate")
    if problem is None and target.suffix.lower() not in Image.registered_extensions():
        problem = f"--annotate {target}: unknown image type {target.suffix!r}; use .png or .jpg"
    if problem is not None:
        raise InputError(problem)


def write_annotated(picture: Image.Image, detections: list[Detection], target: Path) -> None:
    drawn = picture.copy()
    draw = ImageDraw.Draw(drawn)
    for detection in detections:
        draw.rectangle(detection.box, outline=(255, 64, 0), width=3)
        draw.text(
            (detection.box[0] + 3, detection.box[1] + 2),
            f"{detection.label} {detection.score:.2f}",
            fill=(255, 64, 0),
        )
    image_format = Image.registered_extensions()[target.suffix.lower()]
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(target, lambda path: drawn.save(path, format=image_format))
    except (OSError, ValueError) as error:
        raise InputError(f"cannot write {target}: {error}") from error
