"""Opening user images: one clear error for anything that is not a readable image, and a pixel
limit checked from the header, before anything is decoded (decompression bombs)."""

from __future__ import annotations

from io import BytesIO
from pathlib import Path

from PIL import Image, UnidentifiedImageError

from .defaults import DEFAULT_MAX_IMAGE_PIXELS
from .errors import InputError

# npuctl enforces its own limit from the header; Pillow's check would warn or raise instead.
Image.MAX_IMAGE_PIXELS = None


def open_rgb(path: Path, max_pixels: int = DEFAULT_MAX_IMAGE_PIXELS) -> Image.Image:
    try:
        return _decoded(path, str(path), max_pixels)
    except FileNotFoundError:
        raise InputError(f"image {path} does not exist") from None
    except IsADirectoryError:
        raise InputError(f"{path} is a directory, not an image") from None
    except PermissionError:
        raise InputError(f"image {path} is not readable (permission denied)") from None
    except MemoryError:
        raise InputError(f"{path} is too large to decode in the memory available") from None
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as error:
        raise InputError(f"{path} is not an image Pillow can read ({error})") from error


def decode_rgb(data: bytes, max_pixels: int, what: str = "the image") -> Image.Image:
    """An image sent as bytes (a request body), with the same limits as a file."""
    try:
        return _decoded(BytesIO(data), what, max_pixels)
    except MemoryError:
        raise InputError(f"{what} is too large to decode in the memory available") from None
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError, EOFError) as error:
        raise InputError(f"{what} is not an image Pillow can read ({error})") from error


def _decoded(source: Path | BytesIO, what: str, max_pixels: int) -> Image.Image:
    with Image.open(source) as image:
        width, height = image.size
        if width * height > max_pixels:
            raise InputError(
                f"{what} is {width}x{height} = {width * height:,} pixels, over the limit of "
                f"{max_pixels:,}: scale it down or raise --max-image-pixels"
            )
        image.load()
        # A JPEG decodes to RGB already: convert() would copy every pixel once more.
        return image if image.mode == "RGB" else image.convert("RGB")
