"""piuparts on the packages: install, purge, and nothing left behind, in a fresh chroot of a
Debian suite (trixie by default). The suite's base is cached as a tarball. The N -> N+1
upgrade of aipu-dkms is the kernel matrix's package-upgrade step (it needs DKMS builds).

Bookworm's piuparts needs ``-i /var/cache/debconf/tmp.ci/`` against trixie (a piuparts bug:
debconf's own temporary folder is reported as left over).
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from aipu_build.fetch import cache_root
from aipu_build.tools import require_tool

from .chroot import MIRROR

IGNORED = ("/var/cache/debconf/tmp.ci/",)


@dataclass
class PiupartsResult:
    returncode: int
    output: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and "PASS: All tests." in self.output


def run(release: str, debs: list[Path], log: Path) -> PiupartsResult:
    require_tool("piuparts")
    base = cache_root() / "piuparts" / f"{release}.tgz"
    base.parent.mkdir(parents=True, exist_ok=True)
    command = ["piuparts", "-d", release, "-m", MIRROR]
    for path in IGNORED:
        command += ["-i", path]
    command += ["-b", str(base)] if base.exists() else ["--save", str(base)]
    result = subprocess.run(
        [*command, *(str(deb) for deb in debs)],
        capture_output=True,
        text=True,
        check=False,
        timeout=1800,
    )
    output = result.stdout + result.stderr
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(output, encoding="utf-8")
    return PiupartsResult(result.returncode, output)
