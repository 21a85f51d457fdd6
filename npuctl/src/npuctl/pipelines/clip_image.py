"""CLIP image preprocessing, as CLIP's own transform: shortest side to 224 (bicubic), centre
crop 224x224, RGB scaled to [0, 1], normalised with CLIP's mean and std, channels first."""

from __future__ import annotations

import numpy as np
from PIL import Image

SIZE = 224
MEAN = np.array([0.48145466, 0.4578275, 0.40821073], dtype=np.float32)
STD = np.array([0.26862954, 0.26130258, 0.27577711], dtype=np.float32)
# (x / 255 - mean) / std == x * gain + offset, per channel
_GAIN = (1.0 / (255.0 * STD)).astype(np.float32)
_OFFSET = (-MEAN / STD).astype(np.float32)


def resize_and_crop(image: Image.Image, size: int = SIZE) -> Image.Image:
    width, height = image.size
    if width <= height:
        new_width, new_height = size, int(size * height / width)
    else:
        new_width, new_height = int(size * width / height), size
    resized = image.resize((new_width, new_height), Image.Resampling.BICUBIC)
    left = round((new_width - size) / 2.0)
    top = round((new_height - size) / 2.0)
    return resized.crop((left, top, left + size, top + size))


def preprocess(image: Image.Image) -> np.ndarray:
    """float32 array (3, 224, 224), normalised; quantize it with the input descriptor."""
    pixels = np.asarray(resize_and_crop(image.convert("RGB")), dtype=np.float32)
    normalised = pixels * _GAIN + _OFFSET  # (224, 224, 3)
    return np.ascontiguousarray(normalised.transpose(2, 0, 1))
