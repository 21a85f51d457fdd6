"""The NPU drivers npuctl knows, each as its package describes it. drivers.json is generated
from the driver descriptions the packages are built from (dkms/<package>.yaml in the
project's tree), so the doctor speaks of the same module, device node, group, firmware ids
and board files the packages install."""

from __future__ import annotations

import fnmatch
import json
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .system import System


@dataclass(frozen=True)
class Driver:
    package: str  # the Debian package that builds it with DKMS
    module: str  # the .ko (and the DKMS module name)
    platform: str  # npuctl's platform package for this NPU
    python_requires: tuple[str, ...]  # what it needs from PyPI (npuctl's extra of its name)
    platform_driver: str  # /sys/bus/platform/drivers/<name> once loaded
    device_node: str  # under /dev; may be a glob (accel/accel*)
    device_subsystem: str  # misc, accel: for udevadm trigger
    group: str  # the group the package's udev rule gives the node to
    mode: str
    acpi_ids: tuple[str, ...]
    compatibles: tuple[str, ...]  # device-tree compatible patterns (fnmatch)
    kernel_min: str
    config_required: tuple[str, ...]  # kernel symbols the driver needs
    config_in_tree: tuple[str, ...]  # symbols that mean the kernel has the driver itself
    in_tree_module: str  # the kernel's own copy's module name (CIX's tree: armchina_npu)
    takes_over: tuple[str, ...]  # packages building the same module that it replaces
    alternative_to: str  # the family's package this one is another driver line to, or ""
    board_files: tuple[str, ...]  # what the package installs for the board (udev, modprobe)

    def device_paths(self, system: System) -> list[str]:
        return system.glob(f"/dev/{self.device_node}")

    @property
    def device_example(self) -> str:
        """The node as people see it (/dev/aipu, /dev/accel/accel0)."""
        return "/dev/" + self.device_node.replace("*", "0")

    def matches_compatible(self, compatible: str) -> bool:
        """Whether a device-tree compatible property (NUL-separated) names this NPU."""
        return any(
            fnmatch.fnmatchcase(value, pattern)
            for value in compatible.split("\0")
            for pattern in self.compatibles
        )

    def board_files_named(self, suffix: str) -> tuple[str, ...]:
        return tuple(path for path in self.board_files if path.endswith(suffix))


@cache
def all_drivers() -> tuple[Driver, ...]:
    document = json.loads(files(__package__).joinpath("drivers.json").read_text("utf-8"))
    return tuple(
        Driver(
            package=entry["package"],
            module=entry["module"],
            platform=entry["platform"],
            python_requires=tuple(entry["python_requires"]),
            platform_driver=entry["platform_driver"],
            device_node=entry["device"]["node"],
            device_subsystem=entry["device"]["subsystem"],
            group=entry["device"]["group"],
            mode=entry["device"]["mode"],
            acpi_ids=tuple(entry["acpi_ids"]),
            compatibles=tuple(entry["compatibles"]),
            kernel_min=entry["kernel_min"],
            config_required=tuple(entry["config_required"]),
            config_in_tree=tuple(entry["config_in_tree"]),
            in_tree_module=entry["in_tree_module"],
            takes_over=tuple(entry["takes_over"]),
            alternative_to=entry["alternative_to"],
            board_files=tuple(entry["board_files"]),
        )
        for entry in document["drivers"]
    )


def for_platform(platform: str) -> Driver:
    """The family's driver package; of several driver lines, the one the others are
    alternatives to."""
    return next(
        driver
        for driver in all_drivers()
        if driver.platform == platform and not driver.alternative_to
    )


def installed_for_platform(system: System, platform: str) -> Driver:
    """The family's driver whose package dpkg has installed, where the family has more than
    one driver line; the family's driver (for_platform) when none is, or dpkg cannot say."""
    candidates = [driver for driver in all_drivers() if driver.platform == platform]
    if len(candidates) > 1:
        result = system.run(
            "dpkg-query",
            "-W",
            "-f=${Package} ${db:Status-Status}\n",
            *(driver.package for driver in candidates),
        )
        installed = {
            line.split()[0]
            for line in (result.stdout if result else "").splitlines()
            if line.endswith(" installed")
        }
        for driver in candidates:
            if driver.package in installed:
                return driver
    return for_platform(platform)
