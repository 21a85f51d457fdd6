"""CLIP image preprocessing, as CLIP's own transform: shortest side to 224 (bicubic), centre
crop 224x224, RGB scaled to [0, 1], normalised with CLIP's mean and std, channels first."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from PIL import Image

SIZE = 224
MEAN = np.array([0.48145466, 0.4578275, 0.40821073], dtype=np.float32)
STD = np.array([0.26862954, 0.26130258, 0.27577711], dtype=np.float32)
# (x / 255 - mean) / std == x * gain + offset, per channel
_GAIN = (1.0 / (255.0 * STD)).astype(np.float32)
_OFFSET = (-MEAN / STD).astype(np.float32)


def resize_and_crop(image: Image.Image, size: int = SIZE) -> Image.Image:
    """Pillow's bicubic resize of the shortest side to ``size``, then the centre crop, as
    CLIP's own transform (torchvision's CenterCrop rounds the offsets)."""
    width, height = image.size
    if width <= height:
        new_width, new_height = size, int(size * height / width)
    else:
        new_width, new_height = int(size * width / height), size
    resized = _resize(image, new_width, new_height)
    left = round((new_width - size) / 2.0)
    top = round((new_height - size) / 2.0)
    return resized.crop((left, top, left + size, top + size))


def immich_resize_and_crop(image: Image.Image, size: int = SIZE) -> Image.Image:
    """The same steps as Immich's machine-learning server does them for an OpenCLIP model
    (immich_ml/models/transforms.py: resize_pil, crop_pil), whose sizes and offsets are
    computed differently: the long side is int(long / short * size) and the offsets are
    truncated. Its embeddings then match the ones Immich's own server stored."""
    width, height = image.size
    if width < height:
        new_width, new_height = size, int((height / width) * size)
    else:
        new_width, new_height = int((width / height) * size), size
    resized = _resize(image, new_width, new_height)
    left, top = int(new_width / 2 - size / 2), int(new_height / 2 - size / 2)
    return resized.crop((left, top, left + size, top + size))


def _resize(image: Image.Image, width: int, height: int) -> Image.Image:
    # One call on one thread: the server keeps its threads on one core, where splitting the
    # passes into bands only costs the copies of the bands.
    return image.resize((width, height), Image.Resampling.BICUBIC)


def quantized(
    image: Image.Image,
    scale: float,
    zero_point: int,
    dtype: np.dtype,
    fit: Callable[[Image.Image], Image.Image] = resize_and_crop,
) -> np.ndarray:
    """preprocess() quantized to an integer input tensor (q = round(f * scale - zero_point)),
    through a per-channel table of the 256 possible pixel values: the same float32
    arithmetic as quantize(preprocess(image)), done once per value instead of per pixel."""
    limits = np.iinfo(dtype)
    levels = np.arange(256, dtype=np.float32)[:, None] * _GAIN + _OFFSET  # (256, 3)
    table = np.clip(
        np.rint(levels * np.float32(scale) - np.float32(zero_point)), limits.min, limits.max
    ).astype(dtype)
    rgb = image if image.mode == "RGB" else image.convert("RGB")
    pixels = np.asarray(fit(rgb))
    return np.stack([table[pixels[:, :, channel], channel] for channel in range(3)])


def preprocess(
    image: Image.Image, fit: Callable[[Image.Image], Image.Image] = resize_and_crop
) -> np.ndarray:
    """float32 array (3, 224, 224), normalised; quantize it with the input descriptor."""
    pixels = np.asarray(fit(image.convert("RGB")), dtype=np.float32)
    normalised = pixels * _GAIN + _OFFSET  # (224, 224, 3)
    return np.ascontiguousarray(normalised.transpose(2, 0, 1))
