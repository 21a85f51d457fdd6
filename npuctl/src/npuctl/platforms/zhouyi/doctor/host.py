"""The Zhouyi board below the driver: is this a CIX Sky1 with its NPU described, and why a
loaded driver may refuse it. The driver's own checks (headers, DKMS, module, device) are the
shared ones of npuctl.doctor.dkms_driver."""

from __future__ import annotations

from npuctl.doctor.findings import NO_NPU_FIX, Finding, Report, Status
from npuctl.system import System, board_name

from ..facts import ACPI_DEVICE

FIRMWARE_INCOMPLETE = "firmware description incomplete"


def check_platform(system: System, report: Report) -> bool:
    machine = system.machine()
    board = board_name(system)
    if machine not in ("aarch64", "arm64"):
        report.add(
            Finding(
                "platform.arch",
                "platform",
                Status.FAIL,
                f"Platform: {machine}, not arm64 — this is not an Orange Pi 6 Plus",
                "npuctl doctor checks the Zhouyi NPU of the CIX CD8180 (arm64); "
                "run it on the board.",
                fix=NO_NPU_FIX,
            )
        )
        return False
    acpi_status = system.read(f"{ACPI_DEVICE}/status")
    dt_nodes = [
        path
        for path in system.glob("/sys/firmware/devicetree/base/**/compatible")
        if "armchina,zhouyi" in (system.read(path) or "")
    ]
    if acpi_status is not None:
        present = int(acpi_status or "0") & 0x1
        if not present:
            report.add(
                Finding(
                    "platform.npu",
                    "platform",
                    Status.FAIL,
                    f"NPU: ACPI device CIXH4000:00 disabled by the firmware (status {acpi_status})",
                    fix="check the BIOS NPU setting",
                )
            )
            return False
        where = "ACPI device CIXH4000:00"
    elif dt_nodes:
        where = f"device-tree node {dt_nodes[0].rsplit('/', 2)[-2]}"
    else:
        report.add(
            Finding(
                "platform.npu",
                "platform",
                Status.FAIL,
                f"NPU: no CIXH4000 ACPI device or armchina,zhouyi node on {board}",
                "This machine does not describe a Zhouyi NPU: is it an Orange Pi "
                "6 Plus (CIX CD8180)?",
                fix=NO_NPU_FIX,
            )
        )
        return False
    report.add(
        Finding("platform.npu", "platform", Status.OK, f"Platform: arm64, {board}, NPU {where}")
    )
    return True


def explain_unbound(log: list[str]) -> tuple[str, str | None] | None:
    """The driver refuses an NPU the firmware describes incompletely (patch 0010)."""
    incomplete = [line for line in log if FIRMWARE_INCOMPLETE in line]
    if not incomplete:
        return None
    return (
        incomplete[-1].split("] ", 1)[-1] + "\nThe board's firmware (ACPI tables) does not "
        "describe the NPU completely: the driver refused it instead of crashing. Update the "
        "BIOS; its version is in /sys/class/dmi/id/bios_version",
        "cat /sys/class/dmi/id/bios_version   # then update the board's BIOS",
    )
