"""The RK3588 NPU (Orange Pi 5 Plus and other RK3588 boards) on the mainline stack: the
kernel's rocket accel driver (/dev/accel/accel0), Mesa's Teflon TensorFlow Lite delegate and
quantized .tflite models, run through ai-edge-litert."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .platform import Rocket

from .facts import DEFAULT_DELEGATE

__all__ = ["DEFAULT_DELEGATE", "PLATFORM"]


def __getattr__(name: str) -> Any:
    """PLATFORM, from .platform when asked for: the child-process probes (probe.py) import
    this package, and npuctl's command-line interface (click) would cost each child its
    import, seconds on an emulated board."""
    if name == "PLATFORM":
        from .platform import PLATFORM

        return PLATFORM
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


PLATFORM: Rocket
