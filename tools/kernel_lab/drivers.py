"""What the kernel lab needs to know about each driver package to boot its module in QEMU:
the platform driver it registers, a device-tree node that makes it probe, and the line in
the kernel log that shows the probe ran (and failed cleanly: QEMU has none of the SoC's
clocks, resets or power domains)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Driver:
    package: str  # the Debian package, e.g. aipu-dkms
    module: str  # the .ko it builds
    platform_driver: str  # /sys/bus/platform/drivers/<name>
    device_tree_node: str  # added to QEMU's own device tree
    probe_evidence: str  # text in the kernel log once the probe has run
    device_node: str = ""  # a character device the driver creates where it can (/dev/...)
    acpi: bool = False  # boots with the ACPI descriptions of tools/kernel_lab/acpi too


# A Zhouyi V3 node like the board's, at an address nothing in QEMU's virt machine uses: the
# probe must fail cleanly at the power domains (QEMU has none) before touching registers.
AIPU = Driver(
    package="aipu-dkms",
    module="aipu",
    platform_driver="armchina",
    device_tree_node="""
	npu@9200000 {
		compatible = "armchina,zhouyi-v3";
		reg = <0x00 0x9200000 0x00 0x10000>;
		interrupts = <0x00 0x70 0x04>;
	};
""",
    probe_evidence="sky1_npu_probe",
    device_node="aipu",
    acpi=True,
)

# One RK3588 NPU core as the Orange Pi 5 Plus's device tree has it, without the clocks,
# resets and IOMMU QEMU lacks: the probe must stop at the resets and unwind.
ROCKET = Driver(
    package="rocket-dkms",
    module="rocket",
    platform_driver="rocket",
    device_tree_node="""
	npu@9210000 {
		compatible = "rockchip,rk3588-rknn-core";
		reg = <0x00 0x9210000 0x00 0x1000>,
			<0x00 0x9211000 0x00 0x1000>,
			<0x00 0x9213000 0x00 0x1000>;
		reg-names = "pc", "cna", "core";
		interrupts = <0x00 0x71 0x04>;
	};
""",
    probe_evidence="failed to get resets for core",
)

DRIVERS = {driver.package: driver for driver in (AIPU, ROCKET)}
