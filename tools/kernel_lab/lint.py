"""Debian's newest tools on the packages: lintian and appstreamcli of a newer suite (trixie by
default), in a chroot of that suite, on the complete upload set of each ``.changes``. The build
host's own lintian (bookworm's) already ran in ``make deb``; a package must be clean on both.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from .chroot import Suite, create_chroot
from .upload import upload_set

LINT_PACKAGES = ("lintian", "appstream")


@dataclass
class LintResult:
    changes: str
    lintian_version: str
    lintian_output: str
    appstream_output: str
    ok: bool


def lint(suite: Suite, changes_files: list[Path], workdir: Path) -> list[LintResult]:
    chroot = create_chroot(suite, workdir)
    results = []
    try:
        with chroot.mounted():
            chroot.refresh_lists()
            chroot.apt_install(*LINT_PACKAGES)
            version = chroot.run("lintian --version").stdout.strip()
            for changes in changes_files:
                inside = f"/upload/{changes.stem}"
                for path in upload_set(changes):
                    chroot.copy_in(path, f"{inside}/{path.name}")
                lintian = chroot.run(
                    "lintian --fail-on error,warning --display-info "
                    f"{shlex.quote(inside + '/' + changes.name)}",
                    check=False,
                )
                appstream = chroot.run(
                    f"cd {shlex.quote(inside)} && rm -rf x && "
                    'for deb in *.deb; do dpkg-deb -x "$deb" x; done && '
                    "found=$(find x/usr/share/metainfo -name '*.xml' 2>/dev/null); "
                    'if [ -n "$found" ]; then appstreamcli validate --no-net --pedantic $found; '
                    "else echo 'no AppStream metadata'; fi",
                    check=False,
                )
                results.append(
                    LintResult(
                        changes.name,
                        version,
                        (lintian.stdout + lintian.stderr).strip(),
                        (appstream.stdout + appstream.stderr).strip(),
                        lintian.returncode == 0 and appstream.returncode == 0,
                    )
                )
    finally:
        chroot.remove()
    return results
