"""The Zhouyi NPU of the CIX Sky1 SoC (Orange Pi 6 Plus): the aipu driver, CIX's libnoe and
pre-compiled .cix models."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .platform import Zhouyi


def __getattr__(name: str) -> Any:
    """PLATFORM, from .platform when asked for: the child-process probes import this
    package, and npuctl's command-line interface (click) would cost each child its import."""
    if name == "PLATFORM":
        from .platform import PLATFORM

        return PLATFORM
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


PLATFORM: Zhouyi
