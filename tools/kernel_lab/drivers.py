"""What the kernel lab needs to know about each driver package to boot its module in QEMU,
read from the driver's one description (dkms/<package>.yaml): the platform driver it
registers, a device-tree node that makes it probe, and the line in the kernel log that shows
the probe ran (and failed cleanly: QEMU has none of the SoC's clocks, resets or power
domains)."""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.config import load_package, package_names


@dataclass(frozen=True)
class Driver:
    package: str  # the Debian package, e.g. aipu-dkms
    module: str  # the .ko it builds
    platform_driver: str  # /sys/bus/platform/drivers/<name>
    device_tree_node: str  # added to QEMU's own device tree
    probe_evidence: str  # text in the kernel log once the probe has run
    device_node: str = ""  # a character device the driver creates where it can (/dev/...)
    acpi: bool = False  # boots with the ACPI descriptions of tools/kernel_lab/acpi too


def driver(package: str) -> Driver:
    config = load_package(package)
    node = config.device.get("node", "")
    return Driver(
        package=config.name,
        module=config.module,
        platform_driver=config.platform_driver,
        device_tree_node="\n"
        + "".join(f"\t{line}\n" for line in config.lab.device_tree_node.splitlines()),
        probe_evidence=config.lab.probe_evidence,
        # Only a fixed node name can be waited for; accel nodes are numbered at probe.
        device_node="" if "*" in node else node,
        acpi=config.lab.acpi,
    )


DRIVERS = {name: driver(name) for name in package_names()}
AIPU = DRIVERS["aipu-dkms"]
ROCKET = DRIVERS["rocket-dkms"]
