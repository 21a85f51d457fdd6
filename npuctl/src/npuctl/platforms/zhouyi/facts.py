"""What the Zhouyi family is, as plain facts its modules share without importing its
interface (platform.py, which imports them when each stage runs): its name, libnoe's path
and timeouts, its CDI kind, and how its board is found."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from npuctl.system import System

NAME = "zhouyi"
DEFAULT_LIBRARY = "/usr/share/cix/lib/libnoe.so"
# Arm China's libaipudrv as the libaipudrv6 package installs it (user_space.py chooses).
LIBAIPUDRV_LIBRARY = "/usr/lib/aarch64-linux-gnu/libaipudrv.so.6"
DEFAULT_TIMEOUT_MS = 10_000
# noe_job_infer_sync takes the timeout as an int32.
MAX_TIMEOUT_MS = 2**31 - 1
ACPI_DEVICE = "/sys/bus/acpi/devices/CIXH4000:00"
CDI_KIND = "armchina.com/npu"


def locate(system: System) -> str | None:
    """Where the NPU is described: its ACPI device, else a device-tree node."""
    if system.read(f"{ACPI_DEVICE}/status") is not None:
        return "ACPI device CIXH4000:00"
    for path in system.glob("/sys/firmware/devicetree/base/**/compatible"):
        if "armchina,zhouyi" in (system.read(path) or ""):
            return f"device-tree node {path.rsplit('/', 2)[-2]}"
    return None
