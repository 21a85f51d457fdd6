"""Opening user images: one clear error for anything that is not a readable image."""

from __future__ import annotations

from pathlib import Path

from PIL import Image, UnidentifiedImageError

from ..errors import InputError


def open_rgb(path: Path) -> Image.Image:
    try:
        with Image.open(path) as image:
            return image.convert("RGB")
    except FileNotFoundError:
        raise InputError(f"image {path} does not exist") from None
    except IsADirectoryError:
        raise InputError(f"{path} is a directory, not an image") from None
    except (UnidentifiedImageError, OSError, ValueError) as error:
        raise InputError(f"{path} is not an image Pillow can read ({error})") from error
