"""The kernel driver and libnoe as a pair, checked before libnoe opens the NPU: the driver's
version from its own ioctl (or, where the node cannot answer one, the module's sysfs version),
libnoe's from the file the library path resolves to (libnoe.so.0.6.0) or from the package
that installed it. An unknown library version is checked once libnoe has opened the NPU."""

from __future__ import annotations

from pathlib import Path

from npuctl.child import run_module
from npuctl.doctor.findings import Finding, Report, Status
from npuctl.system import System

from ..driver_pairs import umd_from_package, verdict
from ..user_space import library_name, library_version
from .noe_paths import umd_package_version

AREA = "driver-version"
FINDING = "versions"


def kmd_version(system: System, timeout: float) -> tuple[str | None, str]:
    """The driver's version and where it was read; None when it cannot be read."""
    device = str(system.path("/dev/aipu"))
    answer = run_module("npuctl.platforms.zhouyi.kmd", [device], timeout).answer or {}
    if "kmd" in answer:
        return answer["kmd"], "its ioctl"
    version = (system.read("/sys/module/aipu/version") or "").strip()
    if version:
        return version.split("+")[0], "/sys/module/aipu/version"
    return None, answer.get("error", "")


def umd_version(system: System, library: Path) -> str:
    found = library_version(library, system)
    if found or library_name(library) != "libnoe":
        return found
    package = umd_package_version(system)  # a libnoe elsewhere than its package puts it
    return umd_from_package(package) if package else ""


def report_pair(kmd: str, umd: str, report: Report, library: str = "libnoe") -> bool:
    """The pair's finding; False when the pair cannot work."""
    if not kmd:
        report.add(
            Finding(
                FINDING,
                AREA,
                Status.FAIL,
                f"Driver version: the kernel driver reports none ({library} {umd or 'unknown'})",
                "It was built without KMD_VERSION, as upstream's Makefile does: "
                "an old build (cix-npu-driver?) is loaded.",
                fix="sudo apt install aipu-dkms && sudo modprobe -r aipu && sudo modprobe aipu",
            )
        )
        return False
    judged = verdict(kmd, umd, library)
    report.add(Finding(FINDING, AREA, judged.status, judged.summary, judged.detail, fix=judged.fix))
    return judged.status != Status.FAIL


def check_pair(system: System, library: Path, report: Report, timeout: float) -> bool:
    kmd, source = kmd_version(system, timeout)
    if kmd is not None:
        report.facts["kmd"] = {"version": kmd, "read_from": source}
    umd = umd_version(system, library)
    name = library_name(library)
    report.facts["umd"] = {"library": name, "path": str(library), "version": umd}
    if kmd is None or not umd:
        return True  # judged once libnoe reports both (check_library)
    return report_pair(kmd, umd, report, name)
