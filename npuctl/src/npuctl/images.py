"""Opening user images: one clear error for anything that is not a readable image, and a pixel
limit checked from the header, before anything is decoded (decompression bombs). An image
sent over the network must be one of the formats cameras and photo libraries send: any other
of Pillow's many formats (EPS runs Ghostscript, for one) never gets near its decoder."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from collections.abc import Callable
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


# What a request may send: the formats of camera snapshots, photo previews and screenshots.
SENT_FORMATS = ("JPEG", "PNG", "WEBP", "BMP")


class ImageFormatError(InputError):
    """Bytes that are none of the formats a request may send."""


# The pixels a picture may have, by its format and mode (a server's memory budget), or one
# number for every picture.
PixelLimit = int | Callable[[str, str], int]


def decode_rgb(data: bytes, max_pixels: PixelLimit, what: str = "the image") -> Image.Image:
    """An image sent as bytes (a request body), with the same limits as a file, in one of
    SENT_FORMATS."""
    try:
        return _decoded(BytesIO(data), what, max_pixels, SENT_FORMATS)
    except UnidentifiedImageError:  # none of SENT_FORMATS recognised the header
        raise ImageFormatError(
            f"{what} is not a JPEG, PNG, WebP or BMP image (the formats this server reads)"
        ) from None
    except MemoryError:
        raise InputError(f"{what} is too large to decode in the memory available") from None
    except (OSError, ValueError, SyntaxError, EOFError) as error:
        raise InputError(f"{what} is not an image Pillow can read ({error})") from error


def _decoded(
    source: Path | BytesIO,
    what: str,
    max_pixels: PixelLimit,
    formats: tuple[str, ...] | None = None,
) -> Image.Image:
    with Image.open(source, formats=formats) as image:
        width, height = image.size
        if isinstance(max_pixels, int):
            limit, raise_it = max_pixels, "raise --max-image-pixels"
        else:
            limit = max_pixels(image.format or "", image.mode)
            raise_it = (
                f"raise the server's memory limit or --max-image-pixels, which set it for a "
                f"{image.format} in mode {image.mode}"
            )
        if width * height > limit:
            raise InputError(
                f"{what} is {width}x{height} = {width * height:,} pixels, over the limit of "
                f"{limit:,}: scale it down or {raise_it}"
            )
        image.load()
        # A JPEG decodes to RGB already: convert() would copy every pixel once more.
        return image if image.mode == "RGB" else image.convert("RGB")


@functools.cache
def _malloc_trim() -> object | None:
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):  # not glibc
        return None


# glibc's mallopt: allocations from this size on are mapped on their own, and unmapped when
# freed. Fixed, it stops glibc from raising the size after a large block is freed, which
# would leave the next large bodies and pictures in the heap once freed; below it, a
# request's tensors (a camera frame, a detector's output: a megabyte or two) reuse the heap
# instead of faulting fresh pages in at every request.
_M_MMAP_THRESHOLD = -3
LARGE_ALLOCATION = 4 << 20


def map_large_allocations() -> None:
    """From now on, a freed allocation of LARGE_ALLOCATION or more goes back to the system at
    once (a server's large bodies and pictures): its resident memory returns to its warm
    size."""
    name = ctypes.util.find_library("c")
    try:
        mallopt = ctypes.CDLL(name).mallopt if name else None
    except (OSError, AttributeError):  # not glibc
        return
    if mallopt is not None:
        mallopt(_M_MMAP_THRESHOLD, LARGE_ALLOCATION)


def give_back_memory() -> None:
    """Hand the free heap back to the system: a decoded picture of tens of megabytes leaves
    glibc's arenas that large after it is freed, and a server would stay that large."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)  # type: ignore[operator]
