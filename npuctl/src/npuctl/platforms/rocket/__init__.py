"""The RK3588 NPU (Orange Pi 5 Plus and other RK3588 boards) on the mainline stack: the
kernel's rocket accel driver (/dev/accel/accel0), Mesa's Teflon TensorFlow Lite delegate and
quantized .tflite models, run through ai-edge-litert."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from npuctl.platform import Platform

if TYPE_CHECKING:
    from ...system import System

DEFAULT_DELEGATE = "/usr/lib/teflon/libteflon.so"
SOC = "rockchip,rk3588"


def compatibles(system: System, node: str = "") -> list[str]:
    """A device-tree node's compatible strings (NUL-separated in the file)."""
    text = system.read(f"/sys/firmware/devicetree/base{node}/compatible") or ""
    return [item for item in text.split("\0") if item]


def locate(system: System) -> str | None:
    found = [c for c in compatibles(system) if c.startswith(SOC)]
    return f"{found[0]} SoC in the device tree" if found else None


PLATFORM = Platform(
    name="rocket",
    title="RK3588 NPU, rocket driver (Orange Pi 5 Plus)",
    package=__name__,
    locate=locate,
    absent="no rockchip,rk3588 SoC in the device tree",
    run_commands={
        "mobilenet": ("commands", "mobilenet", "Classify images with MobileNet V1 (rocket)."),
        "mobilenet-v2": ("commands", "mobilenet_v2", "Classify images with MobileNet V2 (rocket)."),
        "ssdlite": ("commands", "ssdlite", "Detect objects with SSDLite MobileDet (rocket)."),
    },
    serving=("npuctl.serve.families.rocket", "open_serving"),
    serve_workers=3,  # the NPU's three cores; Mesa's rocket runs one job stream per core
    cdi=("cdi", "edits"),
    cdi_kind="rockchip.com/npu",
    container_image="npuctl-rocket",  # with Mesa's Teflon and the TFLite runtime
    device_paths=("/dev/accel/accel0",),
    global_options=(
        click.option(
            "--delegate",
            type=click.Path(path_type=Path),
            envvar="NPUCTL_TEFLON",
            default=DEFAULT_DELEGATE,
            show_default=True,
            help="Rocket: Mesa's Teflon TensorFlow Lite delegate to use.",
        ),
    ),
)
