"""Image classification: an image to the model's input tensor, scores to labels."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

from npuctl.errors import InputError

from .runtime import TensorSpec


def image_tensor(picture: Image.Image, spec: TensorSpec) -> np.ndarray:
    """The picture resized to the input (bilinear, like Mesa's classification example), as
    uint8, or shifted by 128 for an int8 input."""
    height, width = spec.shape[1], spec.shape[2]
    pixels = np.asarray(picture.convert("RGB").resize((width, height), Image.Resampling.BILINEAR))
    if spec.dtype == np.int8:
        pixels = (pixels.astype(np.int16) - 128).astype(np.int8)
    return pixels.astype(spec.dtype).reshape(1, height, width, 3)


def read_labels(path: Path | None, classes: int) -> list[str]:
    if path is None:
        return [f"class {index}" for index in range(classes)]
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise InputError(f"cannot read the labels {path}: {error}") from error
    labels = [line.strip() for line in lines if line.strip()]
    if len(labels) != classes:
        raise InputError(
            f"{path} has {len(labels)} labels, the model has {classes} classes: pass the "
            "model's own labels with --labels"
        )
    return labels


@dataclass(frozen=True)
class Prediction:
    index: int
    label: str
    score: float  # dequantized output
    raw: int


def top(raw: np.ndarray, spec: TensorSpec, labels: list[str], count: int = 5) -> list[Prediction]:
    scores = spec.dequantize(raw)
    order = np.argsort(-raw.astype(np.int64), kind="stable")[:count]
    return [Prediction(int(i), labels[int(i)], float(scores[i]), int(raw[i])) for i in order]
