"""CLIP image preprocessing, as CLIP's own transform: shortest side to 224 (bicubic), centre
crop 224x224, RGB scaled to [0, 1], normalised with CLIP's mean and std, channels first.

A picture far longer than wide (or wider than long) would be resized whole to 224 x (224 x its
aspect ratio) before the crop threw nearly all of it away: a 1x10000 JPEG of 4 KB becomes a
224x2240000 picture of 1.5 GB. Beyond EXACT_ASPECT only the source lines the crop reads are
resampled, in Pillow's own order of passes, which gives the same picture to within one level in
a few pixels (Pillow's box arithmetic places its filter's centres a hair differently); ordinary
photos keep the resize-then-crop, bit for bit."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from PIL import Image

SIZE = 224
# Up to this aspect ratio the whole picture is resized and then cropped, exactly as CLIP and
# Immich do it (at most 224 x 1792 pixels resized); beyond it, only the crop's region.
EXACT_ASPECT = 8
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
    left = round((new_width - size) / 2.0)
    top = round((new_height - size) / 2.0)
    return _resized_crop(image, (new_width, new_height), (left, top), size)


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
    left, top = int(new_width / 2 - size / 2), int(new_height / 2 - size / 2)
    return _resized_crop(image, (new_width, new_height), (left, top), size)


def _resized_crop(
    image: Image.Image, resized: tuple[int, int], corner: tuple[int, int], size: int
) -> Image.Image:
    """The size x size square at ``corner`` of ``image`` resized to ``resized``. One call on
    one thread: the server keeps its threads on one core, where splitting the passes into
    bands only costs the copies of the bands."""
    (width, height), (new_width, new_height), (left, top) = image.size, resized, corner
    if max(new_width, new_height) <= EXACT_ASPECT * size:
        whole = image.resize(resized, Image.Resampling.BICUBIC)
        return whole.crop((left, top, left + size, top + size))
    # Pillow's two passes in its own order (across, then down), each over only the source
    # lines the crop reads: the filter's reach on either side is 2 source lines per output
    # line when shrinking, 2 when enlarging.
    if new_height > new_width:  # tall: the rows the crop reads
        scale = height / new_height
        start, end = top * scale, (top + size) * scale
        first, last = _reach(start, end, scale, height)
        strip = image.crop((0, first, width, last)).resize(
            (new_width, last - first), Image.Resampling.BICUBIC
        )
        down = (0, start - first, new_width, end - first)
        square = strip.resize((new_width, size), Image.Resampling.BICUBIC, box=down)
        return square.crop((left, 0, left + size, size))
    scale = width / new_width  # wide: the columns the crop reads
    start, end = left * scale, (left + size) * scale
    first, last = _reach(start, end, scale, width)
    across = (start - first, 0, end - first, height)
    strip = image.crop((first, 0, last, height))
    narrow = strip.resize((size, height), Image.Resampling.BICUBIC, box=across)
    return narrow.resize((size, new_height), Image.Resampling.BICUBIC).crop(
        (0, top, size, top + size)
    )


def _reach(start: float, end: float, scale: float, length: int) -> tuple[int, int]:
    margin = math.ceil(2 * max(scale, 1.0)) + 2
    return max(0, math.floor(start) - margin), min(length, math.ceil(end) + margin)


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
