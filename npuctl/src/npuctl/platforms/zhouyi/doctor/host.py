"""Checks of the machine below libnoe: platform, kernel headers, DKMS, the module, Secure
Boot, the device node. Each returns findings; a failed prerequisite makes the dependent
checks say 'skipped' and why."""

from __future__ import annotations

import re
import stat

from npuctl.doctor.findings import NO_NPU_FIX, Finding, Report, Status, skip
from npuctl.doctor.run import board_name
from npuctl.system import System

from .. import ACPI_DEVICE

MODULE = "aipu"
DEVICE_NODE = "/dev/aipu"
DKMS_KEY = "/var/lib/dkms/mok.pub"
UDEV_RULES = (
    "/usr/lib/udev/rules.d/60-aipu-dkms.rules",
    "/lib/udev/rules.d/60-aipu-dkms.rules",
    "/etc/udev/rules.d/60-aipu.rules",
)
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


def check_headers(system: System, report: Report) -> bool:
    release = system.kernel_release()
    if release == "unknown":
        report.add(
            Finding(
                "kernel.headers",
                "kernel",
                Status.FAIL,
                "Kernel: cannot read its release (/proc/sys/kernel/osrelease)",
                "Is /proc mounted and readable?",
            )
        )
        return False
    if system.exists(f"/lib/modules/{release}/build"):
        report.add(
            Finding("kernel.headers", "kernel", Status.OK, f"Kernel {release} with its headers")
        )
        return True
    report.add(
        Finding(
            "kernel.headers",
            "kernel",
            Status.FAIL,
            f"Kernel {release}: no headers, DKMS cannot build the driver for it",
            fix=f"sudo apt install linux-headers-{release}",
        )
    )
    return False


def _dkms_states(output: str) -> dict[str, tuple[str, str]]:
    """kernel -> (version, state) from 'dkms status'."""
    states = {}
    for line in output.splitlines():
        match = re.match(rf"^{MODULE}/([^,]+), ([^,]+), [^:]+: (.+)$", line.strip())
        if match:
            states[match[2]] = (match[1], match[3].split()[0].rstrip(","))
    return states


def _first_error(system: System, version: str, kernel: str) -> str:
    for log in system.glob(
        f"/var/lib/dkms/{MODULE}/{version}/{kernel}/*/log/make.log"
    ) + system.glob(f"/var/lib/dkms/{MODULE}/{version}/build/make.log"):
        text = system.read(log) or ""
        for line in text.splitlines():
            if re.search(r"\berror\b", line, re.IGNORECASE) and "#" not in line[:2]:
                return line.strip()
    return ""


def check_dkms(system: System, report: Report) -> bool:
    area = "dkms"
    result = system.run("dkms", "status", "-m", MODULE)
    if result is None:
        report.add(
            Finding(
                "dkms.registered",
                area,
                Status.FAIL,
                "DKMS is not installed",
                fix="sudo apt install dkms aipu-dkms",
            )
        )
        return False
    release = system.kernel_release()
    states = _dkms_states(result.stdout)
    versions = sorted({version for version, _ in states.values()})
    registered = versions or [
        name.split("-", 1)[1]
        for name in system.listdir("/usr/src")
        if name.startswith(f"{MODULE}-")
    ]
    if not registered:
        report.add(
            Finding(
                "dkms.registered",
                area,
                Status.FAIL,
                "DKMS: the aipu driver is not registered",
                fix="sudo apt install ./aipu-dkms_<version>_all.deb",
            )
        )
        return False
    version = registered[-1]
    conf = system.read(f"/usr/src/{MODULE}-{version}/dkms.conf") or ""
    if conf and not re.search(r'^AUTOINSTALL="?yes"?', conf, re.MULTILINE):
        report.add(
            Finding(
                "dkms.autoinstall",
                area,
                Status.WARN,
                f"DKMS: aipu/{version} is not rebuilt on kernel upgrades (no AUTOINSTALL)",
                "This dkms.conf is not aipu-dkms's.",
                fix="sudo apt install ./aipu-dkms_<version>_all.deb",
            )
        )
    state = states.get(release, (version, "absent"))[1]
    if state != "installed":
        error = _first_error(system, version, release)
        report.add(
            Finding(
                "dkms.installed",
                area,
                Status.FAIL,
                f"DKMS: aipu/{version} is {state} for the running kernel {release}",
                f"first error of the build: {error}" if error else "",
                fix=f"sudo dkms install {MODULE}/{version} -k {release}",
            )
        )
        return False
    kernels = [
        name
        for name in system.listdir("/lib/modules")
        if system.exists(f"/lib/modules/{name}/build")
    ]
    missing = [
        kernel
        for kernel in kernels
        if states.get(kernel, ("", ""))[1] != "installed" and kernel != release
    ]
    if missing:
        report.add(
            Finding(
                "dkms.all-kernels",
                area,
                Status.WARN,
                f"DKMS: aipu/{version} not installed for {', '.join(missing)}",
                "After booting those kernels the NPU would be missing.",
                fix=f"sudo dkms autoinstall -k {missing[0]}",
            )
        )
    report.add(
        Finding("dkms.installed", area, Status.OK, f"DKMS: aipu/{version} installed for {release}")
    )
    report.facts["dkms_version"] = version
    return True


def check_module(system: System, report: Report) -> bool:
    area = "module"
    release = system.kernel_release()
    result = system.run("modinfo", "-F", "filename", MODULE)
    if result is None:
        skip(report, "module.file", area, "Module", "modinfo (kmod) is not installed")
        return False
    path = result.stdout.strip().splitlines()[0] if result.ok and result.stdout.strip() else ""
    if not path:
        report.add(
            Finding(
                "module.file",
                area,
                Status.FAIL,
                f"Module: no aipu.ko for {release}",
                fix="sudo depmod -a",
            )
        )
        return False
    vermagic = system.run("modinfo", "-F", "vermagic", MODULE)
    built_for = vermagic.stdout.split()[0] if vermagic and vermagic.stdout.split() else "?"
    if f"/lib/modules/{release}/updates/dkms/" not in path or built_for != release:
        report.add(
            Finding(
                "module.file",
                area,
                Status.FAIL,
                f"Module: modprobe would load {path} (built for {built_for}), not "
                "the DKMS build for this kernel",
                "A stale or in-tree copy shadows the DKMS module.",
                fix=f"sudo rm {path} && sudo depmod -a"
                if "/updates/dkms/" not in path
                else f"sudo dkms install {MODULE}/<version> -k {release} --force",
            )
        )
        return False
    report.add(Finding("module.file", area, Status.OK, f"Module: {path}"))
    if not system.exists(f"/sys/module/{MODULE}"):
        report.add(
            Finding(
                "module.loaded",
                area,
                Status.FAIL,
                "Module: aipu is not loaded",
                fix=f"sudo modprobe {MODULE}",
            )
        )
        return False
    log = kernel_log(system)
    incomplete = [line for line in log if FIRMWARE_INCOMPLETE in line]
    bound = [
        name
        for name in system.listdir("/sys/bus/platform/drivers/armchina")
        if name.startswith(("CIXH4000", "1426")) or "npu" in name or "aipu" in name
    ]
    if not bound:
        detail = ""
        fix = None
        if incomplete:
            detail = (
                incomplete[-1].split("] ", 1)[-1] + "\nThe board's firmware (ACPI "
                "tables) does not describe the NPU completely: the driver refused it "
                "instead of crashing. Update the BIOS; its version is in "
                "/sys/class/dmi/id/bios_version"
            )
            fix = "cat /sys/class/dmi/id/bios_version   # then update the board's BIOS"
        report.add(
            Finding(
                "module.bound",
                area,
                Status.FAIL,
                "Driver: armchina is loaded but not bound to the NPU",
                detail,
                fix,
            )
        )
        return False
    probe = [line.split("] ", 1)[-1] for line in log if "armchina" in line or "AIPU" in line]
    report.add(
        Finding(
            "module.bound",
            area,
            Status.OK,
            f"Driver: armchina bound to {bound[0]}",
            "\n".join(probe[-4:]),
        )
    )
    control = system.read(f"/sys/bus/platform/devices/{bound[0]}/power/control")
    if control == "auto":
        report.add(
            Finding(
                "module.runtime-pm",
                area,
                Status.WARN,
                "Runtime power management may stall the NPU (power/control is 'auto')",
                fix="sudo npuctl provision --only runtime-pm",
            )
        )
    return True


def kernel_log(system: System) -> list[str]:
    """The driver's kernel log lines, when the log is readable."""
    result = system.run("dmesg")
    if result is None or not result.ok:
        return []
    return [
        line
        for line in result.stdout.splitlines()
        if re.search(r"armchina|aipu|CIXH4000|AIPU", line)
    ]


def check_secure_boot(system: System, report: Report) -> None:
    result = system.run("mokutil", "--sb-state")
    if result is None:
        skip(report, "secureboot", "secureboot", "Secure Boot", "mokutil is not installed")
        return
    if "enabled" not in result.stdout.lower():
        report.add(Finding("secureboot", "secureboot", Status.OK, "Secure Boot: off"))
        return
    if not system.exists(DKMS_KEY):
        report.add(
            Finding(
                "secureboot",
                "secureboot",
                Status.WARN,
                "Secure Boot: on, and DKMS has no signing key yet",
                fix="sudo dkms autoinstall   # creates and uses the key",
            )
        )
        return
    test = system.run("mokutil", "--test-key", DKMS_KEY)
    if test is not None and "is already enrolled" in (test.stdout + test.stderr):
        report.add(
            Finding(
                "secureboot",
                "secureboot",
                Status.OK,
                "Secure Boot: on, the DKMS signing key is enrolled",
            )
        )
        return
    report.add(
        Finding(
            "secureboot",
            "secureboot",
            Status.FAIL,
            "Secure Boot: on, but the DKMS signing key is not enrolled: the kernel refuses aipu.ko",
            "Confirm the enrolment at the next boot.",
            fix=f"sudo mokutil --import {DKMS_KEY}",
        )
    )


def check_device(system: System, report: Report) -> bool:
    area = "device"
    info = system.stat(DEVICE_NODE)
    if info is None:
        report.add(
            Finding(
                "device.node",
                area,
                Status.FAIL,
                f"{DEVICE_NODE} does not exist",
                fix="sudo modprobe aipu",
            )
        )
        return False
    if not stat.S_ISCHR(info.st_mode):
        report.add(
            Finding(
                "device.node",
                area,
                Status.FAIL,
                f"{DEVICE_NODE} is not a character device",
                fix=f"sudo rm {DEVICE_NODE} && sudo modprobe -r aipu && sudo modprobe aipu",
            )
        )
        return False
    mode = stat.S_IMODE(info.st_mode)
    group = system.group_name(info.st_gid)
    description = f"{DEVICE_NODE}: owner uid {info.st_uid}, group {group}, mode {mode:04o}"
    if mode & 0o002:
        report.add(
            Finding(
                "device.node",
                area,
                Status.FAIL,
                f"{description}: world-writable, any user can drive the NPU",
                fix="sudo udevadm trigger --action=add --subsystem-match=misc",
            )
        )
        return False
    rules = [rule for rule in UDEV_RULES if system.exists(rule)]
    if not rules:
        report.add(
            Finding(
                "device.udev",
                area,
                Status.WARN,
                "No udev rule for /dev/aipu: access falls back to root only",
                fix="sudo apt install --reinstall ./aipu-dkms_<version>_all.deb",
            )
        )
    identity = system.identity
    if not system.may_open(info):
        report.add(
            Finding(
                "device.access",
                area,
                Status.FAIL,
                f"{description}: user {identity.name} cannot open it",
                "Membership takes effect at the next login.",
                fix=f"sudo usermod -aG {group} {identity.name}",
            )
        )
        return False
    report.add(
        Finding("device.node", area, Status.OK, f"{description}; {identity.name} may open it")
    )
    return True
