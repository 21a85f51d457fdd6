"""What the rocket family is, as plain facts its modules share without importing its
interface (platform.py, which imports them when each stage runs): its name, where Mesa's
Teflon delegate is, its CDI kind, and how its board is found."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from npuctl.system import System

NAME = "rocket"
DEFAULT_DELEGATE = "/usr/lib/teflon/libteflon.so"
CDI_KIND = "rockchip.com/npu"
SOC = "rockchip,rk3588"


def compatibles(system: System, node: str = "") -> list[str]:
    """A device-tree node's compatible strings (NUL-separated in the file)."""
    text = system.read(f"/sys/firmware/devicetree/base{node}/compatible") or ""
    return [item for item in text.split("\0") if item]


def locate(system: System) -> str | None:
    """Where the board is described: its SoC in the device tree."""
    found = [c for c in compatibles(system) if c.startswith(SOC)]
    return f"{found[0]} SoC in the device tree" if found else None
