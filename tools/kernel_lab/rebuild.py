"""A source package rebuilt as Debian's builders would: in a clean chroot of a suite,
``dpkg-source -x`` of its .dsc, its build dependencies for arm64 from the archive
(``apt-get build-dep -a arm64``), ``dpkg-buildpackage -a arm64`` (a cross build, as the
chroot is amd64), then that suite's lintian on the result, once as an upload must pass it
and once ``--pedantic`` for review. The binary packages built are copied out."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from pipeline.errors import BuildError, ExitCode

from .chroot import Suite, create_chroot

TOOLS = ("dpkg-dev", "build-essential", "crossbuild-essential-arm64", "lintian", "fakeroot")
# What sbuild adds to a cross build's dependencies: the host architecture's C and C++
# run-time libraries, which dpkg-shlibdeps reads the dependencies from.
HOST_ESSENTIAL = ("libc6-dev:arm64", "libstdc++6:arm64", "libgcc-s1:arm64")


@dataclass
class Rebuild:
    dsc: str
    debs: list[Path]
    build_ok: bool
    build_tail: str
    lintian: str
    pedantic: str
    lintian_ok: bool

    @property
    def ok(self) -> bool:
        return self.build_ok and self.lintian_ok


def source_set(dsc: Path) -> list[Path]:
    """The .dsc and the files it names, which must be beside it."""
    text = dsc.read_text(encoding="utf-8")
    files = text.split("\nFiles:\n", 1)[1] if "\nFiles:\n" in text else ""
    names = re.findall(r"^ [0-9a-f]{32} \d+ (\S+)$", files, re.MULTILINE)
    found = [dsc, *(dsc.parent / name for name in names)]
    missing = [path.name for path in found if not path.is_file()]
    if not names or missing:
        raise BuildError(
            f"{dsc.name} names {', '.join(missing) or 'no files'}: not a complete source package",
            ExitCode.BUILD,
        )
    return found


def rebuild(suite: Suite, dsc: Path, workdir: Path, out: Path) -> Rebuild:
    chroot = create_chroot(suite, workdir)
    try:
        with chroot.mounted():
            chroot.refresh_lists()
            chroot.apt_install(*TOOLS, *HOST_ESSENTIAL)
            for path in source_set(dsc):
                chroot.copy_in(path, f"/src/{path.name}")
            quoted = shlex.quote(dsc.name)
            build = chroot.run(
                "cd /src && dpkg-source -x "
                f"{quoted} tree && cd tree && apt-get build-dep -q -y -a arm64 . && "
                "DEB_BUILD_OPTIONS=noddebs dpkg-buildpackage -a arm64 -us -uc -B 2>&1 | tail -40; "
                "exit ${PIPESTATUS[0]}",
                check=False,
            )
            changes = "/src/*_arm64.changes"
            lintian = chroot.run(
                f"lintian --fail-on error,warning --display-info {changes} /src/{quoted}",
                check=False,
            )
            pedantic = chroot.run(
                f"lintian --pedantic --display-info {changes} /src/{quoted}", check=False
            )
            out.mkdir(parents=True, exist_ok=True)
            debs = []
            for built in sorted(chroot.path("/src").glob("*.deb")):
                target = out / built.name
                target.write_bytes(built.read_bytes())
                debs.append(target)
    finally:
        chroot.remove()
    return Rebuild(
        dsc.name,
        debs,
        build.returncode == 0 and bool(debs),
        (build.stdout + build.stderr).strip()[-3000:],
        (lintian.stdout + lintian.stderr).strip(),
        (pedantic.stdout + pedantic.stderr).strip(),
        lintian.returncode == 0,
    )
