"""How this family's inputs are made: texts into CLIP's token ids and pictures into the
visual encoder's quantized tensor. The command line, the embedder and the server all call
these; none of them goes through another's module."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from npuctl.errors import InputError

from .noe.binding import TensorInfo, quantize
from .pipelines import clip_image
from .pipelines.clip_tokenizer import ClipTokenizer

if TYPE_CHECKING:
    from PIL import Image

    from npuctl.settings import Settings


def load_tokenizer(settings: Settings, vocab: Path | None) -> ClipTokenizer:
    if vocab is None:
        entry = settings.manifest.get("clip-bpe-vocab")
        vocab = settings.models_dir / entry.file
        if not vocab.exists():
            raise InputError(
                f"the CLIP vocabulary {vocab} is missing: run 'npuctl models "
                "fetch clip-text' or pass --vocab"
            )
    return ClipTokenizer(vocab)


def clip_input(
    image: Image.Image,
    info: TensorInfo,
    fit: Callable[[Image.Image], Image.Image] = clip_image.resize_and_crop,
) -> np.ndarray:
    """The visual encoder's input tensor, quantized with the descriptor's scale."""
    if info.dtype.kind in "iu":
        return clip_image.quantized(image, info.scale, info.zero_point, info.dtype, fit)
    return quantize(clip_image.preprocess(image, fit), info)
