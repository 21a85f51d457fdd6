"""What the package must do on a Debian system, checked inside a chroot.

Each function performs one step a user (or apt) would and returns what it observed; the
callers (tests, the kernel matrix) decide what counts as success.
"""

from __future__ import annotations

import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from .chroot import Chroot
from .kernels import Kernel


@dataclass
class Step:
    """The outcome of one step: exit code, seconds taken and the output worth keeping."""

    name: str
    returncode: int
    seconds: float
    output: str = ""
    facts: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.returncode == 0


def _timed(chroot: Chroot, name: str, command: str) -> Step:
    started = time.monotonic()
    result = chroot.run(command, check=False)
    return Step(name, result.returncode, time.monotonic() - started, result.stdout + result.stderr)


def install_deb(chroot: Chroot, deb: Path) -> Step:
    inside = chroot.copy_in(deb, f"/tmp/debs/{deb.name}")
    return _timed(chroot, "install", f"apt-get install -y -q {inside}")


def purge(chroot: Chroot, package: str) -> Step:
    return _timed(chroot, "purge", f"apt-get purge -y -q {package}")


def dkms_status(chroot: Chroot, module: str) -> dict[str, str]:
    """kernel release -> state ('installed', 'built', ...) of the module in dkms."""
    output = chroot.run(f"dkms status -m {module}", check=False).stdout
    states = {}
    for line in output.splitlines():
        # "<module>/<version>, 6.12.117+deb13-arm64, x86_64: installed"
        match = re.match(rf"^{module}/[^,]+, ([^,]+), [^:]+: (\w+)", line.strip())
        if match:
            states[match[1]] = match[2]
    return states


def installed_modules(chroot: Chroot, kernel: Kernel, module: str) -> list[str]:
    directory = chroot.path(f"/lib/modules/{kernel.release}")
    return (
        sorted(
            "/" + str(path.relative_to(chroot.root)) for path in directory.rglob(f"{module}.ko*")
        )
        if directory.exists()
        else []
    )


def modinfo(chroot: Chroot, module_path: str) -> dict[str, str]:
    output = chroot.run(["modinfo", module_path]).stdout
    info: dict[str, str] = {}
    for line in output.splitlines():
        key, _, value = line.partition(":")
        info.setdefault(key.strip(), value.strip())
    return info


def leftovers(chroot: Chroot, module: str) -> list[str]:
    """Files a purge must not leave behind: built modules, sources, the DKMS tree."""
    found = [
        "/" + str(path.relative_to(chroot.root))
        for path in chroot.path("/lib/modules").rglob(f"{module}.ko*")
    ]
    found += [
        "/" + str(path.relative_to(chroot.root))
        for path in chroot.path("/usr/src").glob(f"{module}-*")
    ]
    if chroot.path(f"/var/lib/dkms/{module}").exists():
        found.append(f"/var/lib/dkms/{module}")
    return sorted(found)


def werror_build(chroot: Chroot, kernel: Kernel, patched_tree: Path) -> Step:
    """A plain kbuild of the patched tree with -Werror; warnings are counted from its log."""
    inside = f"/tmp/werror-{kernel.release}"
    target = chroot.path(inside)
    if target.exists():
        chroot.run(["rm", "-rf", inside])
    shutil.copytree(patched_tree, target)
    step = _timed(
        chroot,
        "werror-build",
        f"make -C /lib/modules/{kernel.release}/build M={inside} ARCH=arm64 "
        f"CROSS_COMPILE=aarch64-linux-gnu- KCFLAGS=-Werror -j$(nproc) modules 2>&1",
    )
    step.facts.update(build_diagnostics(step.output))
    return step


def dkms_build_log(chroot: Chroot, module: str, release: str) -> str | None:
    """The make.log DKMS keeps after a successful build (dkms 3.0 and 3.2 alike), or None."""
    logs = sorted(chroot.path(f"/var/lib/dkms/{module}").glob(f"*/{release}/*/log/make.log"))
    return logs[-1].read_text(encoding="utf-8", errors="replace") if logs else None


def build_diagnostics(output: str) -> dict[str, str]:
    """Compiler and modpost warnings and errors in a kbuild log."""
    lines = output.splitlines()
    warnings = [line for line in lines if re.search(r"\bwarning\b|^WARNING:", line)]
    errors = [line for line in lines if re.search(r"\berror\b", line)]
    facts = {"warnings": str(len(warnings))}
    if warnings:
        facts["first_warning"] = warnings[0]
    if errors:
        facts["first_error"] = errors[0]
    return facts
