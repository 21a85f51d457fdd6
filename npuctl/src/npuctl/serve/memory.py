"""The server's memory budget, derived from its memory limit so that it holds by construction:
what the models hold once warm, the request bodies held at once, and the decode slots, each
of which may take the largest picture its format and mode allow. A picture's cost is known
from its header (format, mode, size) before any pixel is decoded, so a picture that would not
fit its slot is refused, never decoded."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from .limits import Limits, MiB

# The part of the limit the budget may plan for: the rest is what no plan counts exactly
# (the interpreter's own allocations, a JSON answer, fragmentation).
PLANNED_SHARE = 0.8
# The part of the plannable memory (after the warm models) request bodies may hold at once.
BODY_SHARE = 0.25
MAX_DEFAULT_DECODES = 2
# Bytes per pixel Pillow stores for each mode (Imaging's pixelsize); every other mode takes 4.
_STORED = {"1": 1, "L": 1, "P": 1, "I;16": 2, "I;16B": 2, "I;16L": 2, "I;16N": 2}
# What a format's decoder holds beside the picture, per pixel (measured with Pillow 9.4 and
# 13: WebP decodes into buffers of its own and copies them into the picture, 16.5 bytes a
# pixel at its peak whatever the mode).
_DECODER = {"JPEG": 0.25, "PNG": 0.1, "BMP": 0.3, "WEBP": 12.5}
RGB_BYTES = 4  # Pillow stores RGB in 4 bytes a pixel
# Parsing JSON makes objects of the text: at most this many bytes a byte ('[],' is a list).
JSON_EXPANSION = 24
# What a body that says no size holds before its bytes arrive (then as they do).
UNDECLARED_FIRST = 64 * 1024
_CGROUP_ROOT = Path("/sys/fs/cgroup")


def bytes_per_pixel(image_format: str, mode: str) -> float:
    """What decoding a picture of this format and mode, and converting it to RGB, holds at
    its peak, per pixel."""
    stored = _STORED.get(mode, 4)
    converted = 0 if mode == "RGB" else RGB_BYTES
    return stored + converted + _DECODER.get(image_format, 1.0)


@dataclass(frozen=True)
class Budget:
    """What the memory limit leaves for requests, once the models are warm."""

    limit: int  # bytes
    source: str  # where the limit comes from
    warm: int  # bytes resident once the models are loaded and warm
    decodes: int  # decode slots
    per_decode: int  # bytes one decode may hold
    bodies: int  # bytes of request bodies (as they will be parsed) held at once
    max_pixels: int  # the pixel limit asked for (--max-image-pixels)

    def pixels(self, image_format: str, mode: str) -> int:
        """The largest picture of this format and mode a decode slot holds."""
        return min(self.max_pixels, int(self.per_decode // bytes_per_pixel(image_format, mode)))

    def describe(self) -> str:
        formats = ", ".join(
            f"{name} {self.pixels(name, 'RGB') / 1e6:.0f} MP" for name in ("JPEG", "PNG", "WEBP")
        )
        return (
            f"memory: {self.limit // MiB} MiB ({self.source}), {self.warm // MiB} MiB warm; "
            f"{self.decodes} decode(s) of at most {self.per_decode // MiB} MiB ({formats} in "
            f"RGB), request bodies {self.bodies // MiB} MiB at once"
        )


class TooLittleMemory(Exception):
    pass


def plan(limits: Limits, limit: int, source: str, warm: int, max_pixels: int) -> Budget:
    """The budget under ``limit`` for a server that holds ``warm`` bytes once loaded."""
    plannable = int(limit * PLANNED_SHARE) - warm
    bodies = int(plannable * BODY_SHARE)
    for_decodes = plannable - bodies
    smallest_slot = 4 * MiB  # a VGA frame, decoded
    if bodies < limits.max_body or for_decodes < smallest_slot:
        raise TooLittleMemory(
            f"the memory limit of {limit // MiB} MiB ({source}) leaves "
            f"{max(plannable, 0) // MiB} MiB beside the {warm // MiB} MiB the warm models "
            "hold: raise it (--memory-limit, or the unit's MemoryMax=)"
        )
    decodes = limits.decodes or max(
        1, min(MAX_DEFAULT_DECODES, for_decodes // int(max_pixels * bytes_per_pixel("JPEG", "RGB")))
    )
    return Budget(limit, source, warm, decodes, for_decodes // decodes, bodies, max_pixels)


def memory_limit(option: int, cgroup_root: Path = _CGROUP_ROOT) -> tuple[int, str]:
    """The limit to plan for: --memory-limit, else the cgroup's, else half the memory."""
    if option:
        return option, "--memory-limit"
    found = cgroup_limit(cgroup_root)
    if found is not None:
        return found
    return total_memory() // 2, "half the machine's memory"


def cgroup_limit(root: Path = _CGROUP_ROOT) -> tuple[int, str] | None:
    """The smallest memory limit of this process's cgroup and its parents (v2 memory.max, v1
    memory.limit_in_bytes), or None where none is set."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    candidates: list[Path] = []
    for line in lines:
        hierarchy, controllers, path = [*line.split(":", 2), "", ""][:3]
        relative = path.strip("/")
        if hierarchy == "0" and not controllers:  # v2, alone or beside v1 ("unified")
            base, name = root / "unified" if (root / "unified").is_dir() else root, "memory.max"
        elif "memory" in controllers.split(","):
            base, name = root / "memory", "memory.limit_in_bytes"
        else:
            continue
        folder = base / relative if relative else base
        while True:
            candidates.append(folder / name)
            if folder == base:
                break
            folder = folder.parent
    limits = [value for value in map(_read_limit, candidates) if value is not None]
    if not limits:
        return None
    return min(limits), "the cgroup's memory limit"


def _read_limit(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    if not text.isdigit():
        return None  # "max"
    value = int(text)
    return value if value < total_memory() else None  # v1's "no limit" is a huge number


def total_memory() -> int:
    try:
        found = re.search(r"MemTotal:\s+(\d+) kB", Path("/proc/meminfo").read_text())
    except OSError:
        found = None
    if found:
        return int(found.group(1)) * 1024
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def resident() -> int:
    """This process's resident memory, in bytes."""
    try:
        found = re.search(r"VmRSS:\s+(\d+) kB", Path("/proc/self/status").read_text())
    except OSError:
        return 0
    return int(found.group(1)) * 1024 if found else 0


class MemoryBusy(Exception):
    """The bytes a request needs did not become free in time."""


class ByteBudget:
    """Bytes held at once, shared by the requests on the event loop: a request waits for its
    share and hands it back when it is answered."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.used = 0
        self._freed = asyncio.Condition()

    @contextlib.asynccontextmanager
    async def held(self, size: int, timeout: float) -> AsyncIterator[Held]:
        """Hold ``size`` bytes (at most all of them) for the block, and what the block grows
        its hold to; MemoryBusy when they are not free within ``timeout`` seconds."""
        size = min(size, self.total)
        async with self._freed:
            try:
                await asyncio.wait_for(
                    self._freed.wait_for(lambda: self.used + size <= self.total), timeout
                )
            except TimeoutError:
                raise MemoryBusy from None
            self.used += size
        hold = Held(self, size)
        try:
            yield hold
        finally:
            async with self._freed:
                self.used -= hold.size
                self._freed.notify_all()

    async def resize(self, total: int) -> None:
        """The budget once the models are warm (a request may hold more than it then)."""
        async with self._freed:
            self.total = total
            self._freed.notify_all()


class Held:
    """The bytes one request holds of a ByteBudget. A body that says no size (chunked, or
    compressed) starts with UNDECLARED_FIRST and grows its hold as its bytes arrive, so that a
    peer trickling one holds what it has sent, not the whole budget."""

    def __init__(self, budget: ByteBudget, size: int) -> None:
        self._budget = budget
        self.size = size

    def grow(self, size: int) -> None:
        """Hold ``size`` bytes (at most all of them) from now on; MemoryBusy at once when the
        rest is not free (waiting would let two growing bodies hold each other up)."""
        budget = self._budget
        more = min(size, budget.total) - self.size
        if more <= 0:
            return
        if budget.used + more > budget.total:
            raise MemoryBusy
        budget.used += more
        self.size += more
