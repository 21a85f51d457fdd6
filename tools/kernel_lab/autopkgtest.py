"""The package's own autopkgtest, run by the real ``autopkgtest`` tool on the built source
package, in a chroot of a Debian suite (trixie by default) where arm64 kernel headers are
installed as the kernel matrix installs them. On a plain amd64 testbed the standard DKMS test
(``Testsuite: autopkgtest-pkg-dkms``) only finds amd64 headers, skips them all and passes
as "superficial"; here it must really build the module for the arm64 kernel.

The testbed is the chroot itself (autopkgtest's ``null`` virtualisation server).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from . import kernels
from .chroot import Suite, create_chroot
from .upload import upload_set

TOOLS = ("autopkgtest", "autodep8", "dpkg-dev")


# autopkgtest's exit codes: 0 all passed; 8 no test ran, or all tests were superficial
# (autodep8 declares the DKMS test superficial, so 8 is its success).
PASSING_EXITS = (0, 8)


@dataclass
class AutopkgtestResult:
    kernel: str
    returncode: int
    output: str
    verdicts: dict[str, str]  # kernel -> PASS | SKIP | FAIL, from dkms-autopkgtest's summary

    @property
    def built_for(self) -> list[str]:
        return sorted(kernel for kernel, verdict in self.verdicts.items() if verdict == "PASS")

    @property
    def ok(self) -> bool:
        return (
            self.returncode in PASSING_EXITS
            and self.verdicts.get(self.kernel) == "PASS"
            and "FAIL" not in self.verdicts.values()
        )


def run(suite: Suite, changes: Path, workdir: Path) -> AutopkgtestResult:
    chroot = create_chroot(suite, workdir)
    try:
        with chroot.mounted():
            chroot.refresh_lists()
            kernel = kernels.resolve(chroot, target_release=suite.target_release)
            kernels.install(chroot, kernel, target_release=suite.target_release)
            chroot.apt_install(*TOOLS)
            inside = "/upload"
            files = upload_set(changes)
            for path in files:
                chroot.copy_in(path, f"{inside}/{path.name}")
            dsc = next(path.name for path in files if path.suffix == ".dsc")
            debs = [path.name for path in files if path.suffix == ".deb"]
            command = " ".join(
                [
                    "cd",
                    inside,
                    "&&",
                    "autopkgtest",
                    shlex.quote(dsc),
                    *(shlex.quote(f"./{deb}") for deb in debs),
                    # The chroot is thrown away afterwards: a test may break it.
                    "--ignore-restrictions=breaks-testbed",
                    "--",
                    "null",
                ]
            )
            result = chroot.run(command, check=False, timeout=3600)
            output = result.stdout + result.stderr
            verdicts = {
                release: verdict
                for verdict, release in re.findall(r"^I: (PASS|SKIP|FAIL) \S+ (\S+)$", output, re.M)
            }
            return AutopkgtestResult(kernel.release, result.returncode, output, verdicts)
    finally:
        chroot.remove()
