"""An Immich preview, Immich's own preprocessing restated, and the half-scale decode
measurement, shared by the Immich tests and make bench: one definition of each, so the test
and the bench rows measure the same thing."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
from PIL import Image

from npuctl.images import decode_rgb
from npuctl.platforms.zhouyi.pipelines import clip_image

CLIP_MEAN = np.array([0.48145466, 0.4578275, 0.40821073], dtype=np.float32)
CLIP_STD = np.array([0.26862954, 0.26130258, 0.27577711], dtype=np.float32)


def immich_transform(data: bytes) -> np.ndarray:
    """The float input Immich's machine-learning server computes for an OpenCLIP visual model
    with ViT-B-32__openai's preprocessing (size 224, bicubic, resize mode 'shortest'), restated
    from immich_ml/models/transforms.py and models/clip/visual.py: Image.open, load, RGB (no
    EXIF rotation), resize_pil, crop_pil, to_numpy, normalize, channels first."""
    image = Image.open(io.BytesIO(data))
    image.load()
    if image.mode != "RGB":
        image = image.convert("RGB")
    size = 224
    if image.width < image.height:
        image = image.resize((size, int((image.height / image.width) * size)), Image.BICUBIC)
    else:
        image = image.resize((int((image.width / image.height) * size), size), Image.BICUBIC)
    left, upper = int(image.size[0] / 2 - size / 2), int(image.size[1] / 2 - size / 2)
    image = image.crop((left, upper, left + size, upper + size))
    array = np.asarray(image, dtype=np.float32) / 255.0
    array *= 1.0 / CLIP_STD
    array -= CLIP_MEAN / CLIP_STD
    return array.transpose(2, 0, 1)


def immich_preview(photo: Path) -> bytes:
    """A preview as Immich's server makes them: the long side 1440, JPEG quality 80."""
    buffer = io.BytesIO()
    Image.open(photo).convert("RGB").resize((1080, 1440), Image.LANCZOS).save(
        buffer, "JPEG", quality=80
    )
    return buffer.getvalue()


def half_scale_share(jpeg: bytes) -> float:
    """The share of Immich's quantized 224x224 input that a half-scale decode (Pillow's draft)
    gives within one step of the full-size decode's."""
    half = Image.open(io.BytesIO(jpeg))
    half.draft("RGB", (half.width // 2, half.height // 2))
    return _share_within_one_step(decode_rgb(jpeg, 50_000_000), half.convert("RGB"))


def box_half_share(jpeg: bytes) -> float:
    """The same share for the exact average of each 2x2 block of the full-size decode: what
    the best half-scale picture of the same kind as a DCT-scaled decode would give."""
    full = decode_rgb(jpeg, 50_000_000)
    return _share_within_one_step(full, full.reduce(2))


def _share_within_one_step(full_size: Image.Image, half: Image.Image) -> float:
    def quantized(picture: Image.Image) -> np.ndarray:
        fit = clip_image.immich_resize_and_crop
        return clip_image.quantized(picture, 64.75, 12, np.dtype(np.uint8), fit).astype(int)

    return float(np.mean(np.abs(quantized(half) - quantized(full_size)) <= 1))
