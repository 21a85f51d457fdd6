"""Opening user images: one clear error for anything that is not a readable image, and a pixel
limit checked from the header, before anything is decoded (decompression bombs)."""

from __future__ import annotations

from pathlib import Path

from PIL import Image, UnidentifiedImageError

from .defaults import DEFAULT_MAX_IMAGE_PIXELS
from .errors import InputError

# npuctl enforces its own limit from the header; Pillow's check would warn or raise instead.
Image.MAX_IMAGE_PIXELS = None


def open_rgb(path: Path, max_pixels: int = DEFAULT_MAX_IMAGE_PIXELS) -> Image.Image:
    try:
        with Image.open(path) as image:
            width, height = image.size
            if width * height > max_pixels:
                raise InputError(
                    f"{path} is {width}x{height} = {width * height:,} pixels, over the limit of "
                    f"{max_pixels:,}: scale it down or raise --max-image-pixels"
                )
            return image.convert("RGB")
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
