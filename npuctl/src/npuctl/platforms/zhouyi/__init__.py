"""The Zhouyi NPU of the CIX Sky1 SoC (Orange Pi 6 Plus): the aipu driver, CIX's libnoe and
pre-compiled .cix models."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from npuctl.platform import Platform

if TYPE_CHECKING:
    from ...system import System

DEFAULT_LIBRARY = "/usr/share/cix/lib/libnoe.so"
DEFAULT_TIMEOUT_MS = 10_000
# noe_job_infer_sync takes the timeout as an int32.
MAX_TIMEOUT_MS = 2**31 - 1
ACPI_DEVICE = "/sys/bus/acpi/devices/CIXH4000:00"


def locate(system: System) -> str | None:
    if system.read(f"{ACPI_DEVICE}/status") is not None:
        return "ACPI device CIXH4000:00"
    for path in system.glob("/sys/firmware/devicetree/base/**/compatible"):
        if "armchina,zhouyi" in (system.read(path) or ""):
            return f"device-tree node {path.rsplit('/', 2)[-2]}"
    return None


PLATFORM = Platform(
    name="zhouyi",
    title="Zhouyi NPU, CIX Sky1 (Orange Pi 6 Plus)",
    package=__name__,
    locate=locate,
    absent="no CIXH4000 ACPI device or armchina,zhouyi node",
    commands={
        "cfg": ("cfg_command", "cfg", "Check CixBuilder configs before compiling (Zhouyi)."),
    },
    run_commands={
        "clip-text": ("commands", "clip_text", "CLIP text embeddings (Zhouyi)."),
        "clip-image": ("commands", "clip_image_command", "CLIP image embeddings (Zhouyi)."),
        "yolo": ("commands", "yolo_command", "YOLOv8 object detection (Zhouyi)."),
    },
    embedder=("embedder", "open_embedder"),
    serving=("npuctl.serve.families.zhouyi", "open_serving"),
    cdi=("cdi", "edits"),
    cdi_kind="armchina.com/npu",
    device_paths=("/dev/aipu",),
    global_options=(
        click.option(
            "--library",
            type=click.Path(path_type=Path),
            envvar="NPUCTL_LIBNOE",
            default=DEFAULT_LIBRARY,
            show_default=True,
            help="Zhouyi: libnoe.so to use.",
        ),
        click.option(
            "--timeout-ms",
            type=click.IntRange(1, MAX_TIMEOUT_MS),
            default=DEFAULT_TIMEOUT_MS,
            show_default=True,
            help="Zhouyi: timeout of one inference (at most 2147483647, libnoe's int32).",
        ),
    ),
    provision_options=(
        click.option(
            "--umd-deb",
            type=click.Path(path_type=Path, exists=True, dir_okay=False),
            default=None,
            help="Zhouyi: CIX's cix-noe-umd .deb to install without its pip postinst.",
        ),
        click.option(
            "--ld-path",
            is_flag=True,
            help="Zhouyi: also add libnoe's folder to the linker path (npuctl loads it by path).",
        ),
    ),
)
