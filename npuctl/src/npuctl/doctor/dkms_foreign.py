"""Registrations of the driver's DKMS module that none of this project's packages made: a
vendor's own 'dkms add' of a source tree under the same module name, or another vendor's
package whose postinst registers one. apt cannot replace what it did not install, and DKMS
builds every registered version, keeping one per kernel: the doctor names each such
registration, which build modprobe loads, and how to remove it."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..drivers import Driver, all_drivers
from ..system import System
from .findings import Finding, Report, Status

FINDING = "dkms.foreign"


@dataclass(frozen=True)
class Registration:
    version: str
    kernel: str  # "" where dkms status names no kernel (added, not built)
    state: str


def registrations(output: str, module: str) -> list[Registration]:
    """Every line of 'dkms status' for ``module``, one per version and kernel."""
    found = []
    for line in output.splitlines():
        match = re.match(
            rf"^{re.escape(module)}/([^,:]+)(?:, ([^,]+), [^:]+)?: (.+)$", line.strip()
        )
        if match:
            found.append(Registration(match[1], match[2] or "", match[3].split()[0].rstrip(",")))
    return found


def ours(system: System, driver: Driver, version: str) -> bool:
    """Whether /usr/src/<module>-<version> is one of this project's packages' (its dkms.conf
    says which description generated it)."""
    conf = system.read(f"/usr/src/{driver.module}-{version}/dkms.conf") or ""
    packages = [other.package for other in all_drivers() if other.module == driver.module]
    return any(f"generated from dkms/{package}.yaml" in conf for package in packages)


def _owner(system: System, path: str) -> str:
    """The Debian package that installed ``path``, or ''."""
    result = system.run("dpkg-query", "-S", path)
    if result is None or not result.ok:
        return ""
    first = result.stdout.strip().splitlines()[0] if result.stdout.strip() else ""
    return first.split(":")[0].split(",")[0].strip() if ":" in first else ""


def report_foreign(
    system: System, driver: Driver, status_output: str, registered: list[str], report: Report
) -> list[str]:
    """A finding for the registrations of ``driver.module`` that are not this project's; the
    versions that are, oldest first."""
    module, release = driver.module, system.kernel_release()
    own = [version for version in registered if ours(system, driver, version)]
    foreign = [version for version in registered if version not in own]
    if not foreign:
        return own
    lines = registrations(status_output, module)
    loaded = next((r.version for r in lines if r.kernel == release and r.state == "installed"), "")
    packages = [other.package for other in all_drivers() if other.module == driver.module]
    removals = []
    owners = []
    for version in foreign:
        owner = _owner(system, f"/usr/src/{module}-{version}")
        if owner:
            owners.append(f"{module}/{version} (package {owner})")
            removals.append(f"sudo apt purge {owner}")
        else:
            owners.append(f"{module}/{version} (added by hand: dkms add)")
            removals.append(
                f"sudo dkms remove {module}/{version} --all && "
                f"sudo rm -rf /usr/src/{module}-{version}"
            )
    if own:
        removals.append(f"sudo dkms install {module}/{own[-1]} -k {release} --force")
    removals.append(f"sudo depmod -a && sudo modprobe -r {module}; sudo modprobe {module}")
    whose = ", ".join(owners)
    if loaded in foreign:
        status = Status.FAIL
        summary = (
            f"DKMS: modprobe loads {module}/{loaded} on {release}, a registration none of "
            f"{' or '.join(packages)} made"
        )
    else:
        status = Status.WARN
        summary = f"DKMS: {whose} registered beside " + (
            f"{driver.package}'s {module}/{own[-1]}" if own else "no package of this project"
        )
    detail = (
        f"Registered under the module name {module} by something other than this project's "
        f"packages: {whose}. "
        + (f"modprobe loads {module}/{loaded} on {release}. " if loaded else "")
        + "DKMS builds every registered version and keeps the highest one per kernel, so a "
        "kernel upgrade can switch drivers; apt cannot remove what it did not install."
    )
    report.add(Finding(FINDING, "dkms", status, summary, detail, fix=" && ".join(removals)))
    report.facts["dkms_foreign"] = foreign
    return own
