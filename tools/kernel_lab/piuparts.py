"""piuparts on the packages, in a fresh chroot of a Debian suite (trixie by default): install
and purge, and, with the previous versions served from a local repository, install N ->
upgrade to N+1 -> purge; nothing may be left behind. The suite's base is cached as a tarball.

Bookworm's piuparts needs ``-i /var/cache/debconf/tmp.ci/`` against trixie (a piuparts bug:
debconf's own temporary folder is reported as left over).
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from pipeline import tools
from pipeline.fetch import cache_root

from .chroot import MIRROR

IGNORED = ("/var/cache/debconf/tmp.ci/",)
# Install, upgrade and purge of the packages on a cached base: minutes; a hang is stopped.
TIMEOUT = 1800


@dataclass
class PiupartsResult:
    returncode: int
    output: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and "PASS: All tests." in self.output

    @property
    def upgraded(self) -> bool:
        return "PASS: Installation, upgrade and purging tests." in self.output


def run(release: str, debs: list[Path], log: Path, previous: list[Path] = ()) -> PiupartsResult:
    """piuparts on ``debs``; with ``previous`` (older versions of the same packages), also
    the upgrade from them."""
    tools.require_tool("piuparts")
    tools.require_tool("dpkg-scanpackages")
    with tempfile.TemporaryDirectory(prefix="piuparts-repo-") as scratch:
        repository = Path(scratch)
        extra: list[str] = []
        if previous:
            for deb in previous:
                shutil.copyfile(deb, repository / deb.name)
            index = tools.run(
                ["dpkg-scanpackages", "-m", "."], cwd=repository, failure="dpkg-scanpackages"
            )
            (repository / "Packages").write_text(index.stdout, encoding="utf-8")
            extra = [
                "--bindmount",
                str(repository),
                "--extra-repo",
                f"deb [trusted=yes] file://{repository} ./",
            ]
        return _piuparts(release, debs, log, extra)


def _piuparts(release: str, debs: list[Path], log: Path, extra: list[str]) -> PiupartsResult:
    base = cache_root() / "piuparts" / f"{release}.tgz"
    base.parent.mkdir(parents=True, exist_ok=True)
    command = ["piuparts", "-d", release, "-m", MIRROR]
    for path in IGNORED:
        command += ["-i", path]
    command += ["-b", str(base)] if base.exists() else ["--save", str(base)]
    command += extra
    result = tools.run([*command, *debs], check=False, timeout=TIMEOUT, failure="piuparts")
    output = result.stdout + result.stderr
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(output, encoding="utf-8")
    return PiupartsResult(result.returncode, output)
