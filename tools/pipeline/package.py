"""Assemble the Debian source package (pristine upstream + rendered debian/) and build it.

The orig tarball is the verified upstream subtree exactly as pinned; patches/ becomes
debian/patches, so the source package carries the same quilt series the repository does.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import shutil
import tarfile
import tempfile
from pathlib import Path

from .atomic import replaced_directory, write_atomically
from .config import DEBIAN_TEMPLATES, METAINFO_TEMPLATE, Config
from .errors import BuildError, ExitCode
from .patching import series
from .render import DKMS_TEMPLATE, render_file, render_tree, template_context
from .tools import require_tool, run

# Debian packages build with the system's tools only: no virtualenv or pyenv Python on PATH.
DEBIAN_BUILD_ENV = {
    **{
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("VIRTUAL_ENV", "PYENV"))
    },
    "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
}


def orig_tarball(config: Config, upstream: Path, build_dir: Path) -> Path:
    """A reproducible ``.orig.tar.xz`` of the pristine upstream tree."""
    target = build_dir / f"{config.name}_{config.version}.orig.tar.xz"
    if target.exists():
        return target
    mtime = dt.datetime.strptime(config.upstream.date, "%Y%m%d").replace(tzinfo=dt.UTC).timestamp()
    return write_orig_tarball(upstream, target, config.source_dir_name, int(mtime))


def write_orig_tarball(upstream: Path, target: Path, top: str, mtime: int) -> Path:
    """``upstream`` as a reproducible tarball under the folder ``top``: sorted, owned by
    root, every file's time ``mtime``."""
    build_dir = target.parent
    build_dir.mkdir(parents=True, exist_ok=True)

    def normalise(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        info.mtime = int(mtime)
        return info

    handle, temporary = tempfile.mkstemp(prefix=f".{target.name}-", dir=build_dir)
    try:
        with (
            os.fdopen(handle, "wb") as stream,
            tarfile.open(fileobj=stream, mode="w:xz", format=tarfile.GNU_FORMAT) as archive,
        ):
            for path in sorted([upstream, *upstream.rglob("*")]):
                relative = path.relative_to(upstream)
                name = top if relative == Path() else f"{top}/{relative.as_posix()}"
                archive.add(path, arcname=name, recursive=False, filter=normalise)
        Path(temporary).replace(target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return target


def render_debian_dir(config: Config, upstream: Path, debian: Path) -> None:
    """Write debian/: templates, dkms.conf, the provision files and the quilt series."""
    context = template_context(config, upstream)
    render_tree(DEBIAN_TEMPLATES, debian, context)
    write_atomically(debian / f"{config.name}.dkms", render_file(DKMS_TEMPLATE, context))
    # Installed by path (debian/board/ in <package>.install), not by dh_installudev:
    # bookworm's debhelper would put udev rules under the aliased /lib (lintian's
    # aliased-location on trixie); udev and modprobe read /usr/lib on bookworm too.
    for board_file in config.board_files:
        text = (
            render_file(board_file.source, context)
            if board_file.source.suffix == ".j2"
            else board_file.source.read_text(encoding="utf-8")
        )
        # An executable board file (an initramfs hook) stays executable.
        executable = board_file.source.stat().st_mode & 0o111
        write_atomically(debian / "board" / board_file.name, text, 0o755 if executable else 0o644)
    write_atomically(
        debian / "metainfo" / f"{config.appstream_id}.metainfo.xml",
        render_file(METAINFO_TEMPLATE, context),
    )
    names = series(config.patches_dir)
    if names:
        patches = debian / "patches"
        patches.mkdir(parents=True, exist_ok=True)
        for name in names:
            shutil.copyfile(config.patches_dir / name, patches / name)
        write_atomically(patches / "series", "".join(f"{name}\n" for name in names))


def source_tree(config: Config, upstream: Path, build_dir: Path) -> Path:
    """``build_dir/<name>-<version>``: pristine upstream plus debian/, replaced atomically."""
    orig_tarball(config, upstream, build_dir)
    destination = build_dir / config.source_dir_name
    with replaced_directory(destination) as tree:
        shutil.copytree(upstream, tree, symlinks=True)
        render_debian_dir(config, upstream, tree / "debian")
    return destination


def build_packages(
    config: Config, upstream: Path, build_dir: Path, dist: Path, *, lintian: bool = True
) -> list[Path]:
    """dpkg-buildpackage (source + binary), then lintian; artifacts are copied to ``dist``."""
    for tool in ("dpkg-buildpackage", "dh", "dh_dkms", "fakeroot", "lintian"):
        require_tool(tool)
    build_dir = build_dir.resolve()
    tree = source_tree(config, upstream, build_dir)
    stem = f"{config.name}_{config.debian_version}"
    artifacts = [
        build_dir / f"{stem}.dsc",
        build_dir / f"{config.name}_{config.version}.orig.tar.xz",
        build_dir / f"{stem}.debian.tar.xz",
        build_dir / f"{stem}_all.deb",
    ]
    return dpkg_buildpackage(tree, stem, artifacts, dist, lintian=lintian)


def dpkg_buildpackage(
    tree: Path, stem: str, artifacts: list[Path], dist: Path, *, lintian: bool
) -> list[Path]:
    """Build source and binary packages of ``tree``, check them, copy them to ``dist``."""
    build_dir = tree.parent
    log = build_dir / f"{stem}.build.log"
    with log.open("w", encoding="utf-8") as stream:
        result = run(
            ["dpkg-buildpackage", "-us", "-uc", "--build=source,all"],
            cwd=tree,
            env=DEBIAN_BUILD_ENV,
            output=stream,
            check=False,
            failure=f"dpkg-buildpackage failed (full log: {log})",
        )
    if result.returncode != 0:
        raise BuildError(
            f"dpkg-buildpackage failed: {first_error(log)} (full log: {log})", ExitCode.BUILD
        )
    changes = sorted(build_dir.glob(f"{stem}_*.changes"))
    buildinfo = sorted(build_dir.glob(f"{stem}_*.buildinfo"))
    missing = [path.name for path in artifacts if not path.exists()]
    if missing or not changes or not buildinfo:
        raise BuildError(
            f"dpkg-buildpackage did not produce {', '.join(missing) or 'a .changes file'}",
            ExitCode.BUILD,
        )
    if lintian:
        run_lintian(changes[-1])
    dist.mkdir(parents=True, exist_ok=True)
    copied = []
    # The complete upload set: everything the .changes names (lintian, dcmd, debsign and
    # dput read it), the .buildinfo included.
    for path in [*artifacts, buildinfo[-1], changes[-1]]:
        target = dist / path.name
        shutil.copyfile(path, target)
        copied.append(target)
    return copied


def run_lintian(changes: Path) -> str:
    result = run(
        ["lintian", "--fail-on", "error,warning", "--info", "--display-info", changes],
        failure=f"lintian reports errors or warnings for {changes.name} "
        f"(run 'lintian -i {changes}')",
        code=ExitCode.BUILD,
    )
    return result.stdout


def first_error(log: Path) -> str:
    """The first line of a build log that says what went wrong."""
    lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    pattern = re.compile(
        r"(^E: |\berror: |^\S+: error\b|\*\*\* |unmet build dependencies)", re.IGNORECASE
    )
    for line in lines:
        if pattern.search(line):
            return line.strip()
    return lines[-1].strip() if lines else "no output"
