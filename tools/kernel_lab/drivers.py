"""What the kernel lab needs to know about each driver package to boot its module in QEMU,
read from the driver's one description (dkms/<package>.yaml): the platform driver it
registers, a device-tree node that makes it probe, and the line in the kernel log that shows
the probe ran (and failed cleanly: QEMU has none of the SoC's clocks, resets or power
domains)."""

from __future__ import annotations

from dataclasses import dataclass, field

from pipeline.config import AcpiBoots, Config, load_package, package_names

INITRAMFS_HOOKS = "/usr/share/initramfs-tools/hooks/"


@dataclass(frozen=True)
class Driver:
    package: str  # the Debian package, <name>-dkms
    module: str  # the .ko it builds
    platform_driver: str  # /sys/bus/platform/drivers/<name>
    device_tree_node: str  # added to QEMU's own device tree
    probe_evidence: str  # text in the kernel log once the probe has run
    device_node: str = ""  # a character device the driver creates where it can (/dev/...)
    acpi: AcpiBoots | None = field(
        default=None, hash=False
    )  # UEFI boots with ACPI descriptions of the NPU, if given
    initramfs_hook: str = ""  # the initramfs-tools hook the package installs, if any
    acpi_id: str = ""  # the ACPI hardware id the firmware describes the NPU by
    # Code compiled in only where the kernel exports what it calls: name -> symbols it imports.
    optional_code: dict[str, tuple[str, ...]] = field(default_factory=dict, hash=False)
    # Simulated distribution kernel -> "build", "build with <name>" or the reasons to skip it.
    distribution_kernels: dict[str, str | tuple[str, ...]] = field(default_factory=dict, hash=False)
    # Code built only where the kernel's headers have a layout: name -> (symbols, header, text
    # that leaves it out).
    layout_gated_code: dict[str, tuple[tuple[str, ...], str, str]] = field(
        default_factory=dict, hash=False
    )


def driver(package: str) -> Driver:
    return from_config(load_package(package))


def from_config(config: Config) -> Driver:
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
        initramfs_hook=next(
            (
                board_file.installed_path
                for board_file in config.board_files
                if board_file.installed_path.startswith(INITRAMFS_HOOKS)
            ),
            "",
        ),
        acpi_id=config.acpi_ids[0] if config.acpi_ids else "",
        optional_code=config.lab.optional_code,
        distribution_kernels=config.lab.distribution_kernels,
        layout_gated_code=config.lab.layout_gated_code,
    )


DRIVERS = {name: driver(name) for name in package_names()}
