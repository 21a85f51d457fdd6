"""A user-mode library built from a driver package's pinned upstream commit, for arm64, as a
binary package of its own (dkms/<package>.yaml's "library").

The library is cross-compiled with upstream's own Makefile and the aarch64 cross compiler,
and the .deb is assembled with dpkg-deb: a cross dpkg-buildpackage would need the arm64 C++
toolchain's multiarch packages installed on the build host, which nothing else here needs.
The result is cached by its inputs (tree id, build settings, compiler, this file and the
templates), so a second 'make deb' only copies it; lintian checks it either way.
"""

from __future__ import annotations

import dataclasses
import email.utils
import gzip
import hashlib
import json
import os
import re
import shutil
import tempfile
from pathlib import Path

from .config import REPO_ROOT, Config, Library
from .errors import BuildError, ExitCode
from .fetch import cache_root, fetch_upstream, find_upstream
from .render import render_file, render_string, upstream_copyrights
from .tools import require_tool, run

TEMPLATES = REPO_ROOT / "debian" / "library"
CROSS = "aarch64-linux-gnu-"
LIBRARY_DIR = "usr/lib/aarch64-linux-gnu"
# Hardening as Debian's dpkg-buildflags sets it for a C++ library (lintian checks it).
HARDENING = "-O2 -fstack-protector-strong -D_FORTIFY_SOURCE=2 -Wl,-z,relro -Wl,-z,now"
# libstdc++'s symbol versions and the GCC release that brought each (Debian's libstdc++6
# symbols file names the package version by the GCC release).
_GLIBCXX_RELEASE = {26: "9", 27: "10", 28: "10", 29: "11", 30: "12", 31: "13", 32: "13", 33: "14"}


def _described(config: Config) -> Library:
    if config.library is None:
        raise BuildError(f"{config.name} describes no library", ExitCode.USAGE)
    return config.library


def _as_upstream(config: Config) -> Config:
    """The description with the library's subtree of the same commit as its upstream."""
    library = _described(config)
    upstream = dataclasses.replace(
        config.upstream, paths=(library.subtree,), tree_id=library.tree_id
    )
    return dataclasses.replace(config, upstream=upstream)


def library_upstream(config: Config, git_source: str | None = None) -> Path:
    """The library's verified subtree of the description's commit, fetched when needed."""
    return fetch_upstream(_as_upstream(config), git_source=git_source)


def cached_library_upstream(config: Config) -> Path | None:
    """The library's verified subtree when the cache has it, else None."""
    return find_upstream(_as_upstream(config))


def debian_version(config: Config) -> str:
    library = _described(config)
    return f"{library.version}+git{config.upstream.date}.{config.upstream.commit[:7]}-1"


def _epoch(config: Config) -> str:
    """The changelog entry's date: every file's time in the package, for reproducibility."""
    return str(int(email.utils.parsedate_to_datetime(config.changelog_date).timestamp()))


def _compiler() -> str:
    return run(
        [f"{CROSS}g++", "--version"], failure=f"{CROSS}g++ does not run", code=ExitCode.TOOL
    ).stdout.splitlines()[0]


def _inputs_key(config: Config) -> str:
    library = _described(config)
    own = [Path(__file__), *sorted(TEMPLATES.iterdir())]
    document = {
        "library": dataclasses.asdict(library),
        "version": debian_version(config),
        "maintainer": config.maintainer,
        "compiler": _compiler(),
        "hardening": HARDENING,
        "files": [hashlib.sha256(path.read_bytes()).hexdigest() for path in own],
    }
    return hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()[:20]


def _compile(library: Library, tree: Path, work: Path, epoch: str) -> Path:
    license_text = (tree / library.license_file).read_text(encoding="utf-8", errors="replace")
    if library.license.split("-")[0] not in license_text:
        raise BuildError(
            f"{library.license_file} of the pinned tree is not the {library.license} license "
            "the description names",
            ExitCode.VERIFY,
        )
    source, objects, out = work / "src", work / "obj", work / "out"
    shutil.copytree(tree, source, symlinks=True)
    out.mkdir()
    places = {
        "objects": objects, "output": out, "soname": library.soname,
        "file_name": library.file_name,
    }  # fmt: skip
    variables = {
        **{name: value.format(**places) for name, value in library.make_variables.items()},
        "CXX": f"{CROSS}g++ {HARDENING}",
        "AR": f"{CROSS}ar",
    }
    log = work / "build.log"
    with log.open("w", encoding="utf-8") as output:
        result = run(
            [
                "make", f"-j{os.cpu_count() or 1}", "-C", str(source / library.make_directory),
                library.make_target, *(f"{name}={value}" for name, value in variables.items()),
            ],
            failure="", check=False, output=output, timeout=1800,
            env={**os.environ, "LC_ALL": "C", "SOURCE_DATE_EPOCH": epoch},
        )  # fmt: skip
    built = out / library.file_name
    if result.returncode != 0 or not built.is_file():
        from .package import first_error

        raise BuildError(
            f"building {library.file_name} failed: {first_error(log)} (log: {log})",
            ExitCode.BUILD,
        )
    return built


def _depends(binary: Path) -> list[str]:
    """The library's run-time dependencies, from the symbol versions it needs."""
    versions = run(
        [f"{CROSS}readelf", "-V", "--wide", str(binary)],
        failure=f"cannot read {binary.name}",
        code=ExitCode.TOOL,
    ).stdout
    glibc = max(
        (tuple(map(int, found.split("."))) for found in re.findall(r"GLIBC_(\d+\.\d+)", versions)),
        default=(2, 17),
    )
    depends = [f"libc6 (>= {'.'.join(map(str, glibc))})"]
    cxx = [int(found) for found in re.findall(r"GLIBCXX_3\.4\.(\d+)", versions)]
    if cxx:
        release = _GLIBCXX_RELEASE.get(max(cxx))
        if release is None:
            raise BuildError(
                f"{binary.name} needs GLIBCXX_3.4.{max(cxx)}, which this tool cannot name a "
                "libstdc++6 for",
                ExitCode.BUILD,
            )
        depends += ["libgcc-s1 (>= 3.0)", f"libstdc++6 (>= {release})"]
    return depends


def _assemble(config: Config, tree: Path, built: Path, work: Path) -> Path:
    library = _described(config)
    version = debian_version(config)
    root = work / "root"
    lib_dir = root / LIBRARY_DIR
    doc = root / "usr/share/doc" / library.package
    lib_dir.mkdir(parents=True)
    doc.mkdir(parents=True)
    installed = lib_dir / library.file_name
    run(
        [f"{CROSS}strip", "--strip-unneeded", "--remove-section=.comment", "-o", installed, built],
        failure=f"cannot strip {built.name}",
    )
    installed.chmod(0o644)
    (lib_dir / library.soname).symlink_to(library.file_name)
    context = {
        "library": library,
        "version": version,
        "source": config.name,
        "maintainer": config.maintainer,
        "homepage": config.homepage,
        "commit": config.upstream.commit,
        "distribution": config.changelog_distribution,
        "date": config.changelog_date,
        "upstream_name": Path(config.upstream.repository).stem,
        # The holders of the library's own code; the bundled code's are described.
        "copyrights": sorted(
            {
                line
                for part in ("src", "include")
                for line in upstream_copyrights(tree / library.make_directory / part)
            }
        ),
        "description": render_string(library.description, {"config": config}),
        "depends": _depends(installed),
    }
    (doc / "copyright").write_text(render_file(TEMPLATES / "copyright.j2", context))
    overrides = root / "usr/share/lintian/overrides"
    overrides.mkdir(parents=True)
    (overrides / library.package).write_text(
        render_file(TEMPLATES / "lintian-overrides.j2", context)
    )
    changelog = render_file(TEMPLATES / "changelog.j2", context).encode()
    with (
        (doc / "changelog.Debian.gz").open("wb") as raw,
        gzip.GzipFile(
            fileobj=raw, mode="wb", compresslevel=9, mtime=int(_epoch(config)), filename=""
        ) as z,
    ):
        z.write(changelog)
    control = root / "DEBIAN"
    control.mkdir()
    size = sum(path.stat().st_size for path in root.rglob("*") if path.is_file()) // 1024 + 1
    (control / "control").write_text(
        render_file(TEMPLATES / "control.j2", {**context, "installed_size": size})
    )
    stem = library.soname.split(".so.")[0]
    major = library.soname.rsplit(".", 1)[1]
    (control / "shlibs").write_text(f"{stem} {major} {library.package} (>= {library.version})\n")
    (control / "triggers").write_text("activate-noawait ldconfig\n")
    sums = [
        f"{hashlib.md5(path.read_bytes()).hexdigest()}  {path.relative_to(root)}"
        for path in sorted(root.rglob("*"))
        if path.is_file() and not path.is_symlink() and control not in path.parents
    ]
    (control / "md5sums").write_text("\n".join(sums) + "\n")
    deb = work / f"{library.package}_{version}_arm64.deb"
    run(
        ["dpkg-deb", "--root-owner-group", "-Zxz", "--build", root, deb],
        failure=f"dpkg-deb could not build {deb.name}",
        env={**os.environ, "SOURCE_DATE_EPOCH": _epoch(config)},
    )
    return deb


def build_library_package(
    config: Config, dist: Path, *, git_source: str | None = None, lintian: bool = True
) -> Path:
    """The library's .deb in ``dist``: from the cache when its inputs are unchanged."""
    library = _described(config)
    for tool in ("make", f"{CROSS}g++", f"{CROSS}strip", "dpkg-deb"):
        require_tool(tool)
    cached = cache_root() / "built" / library.package / _inputs_key(config)
    debs = sorted(cached.glob("*.deb")) if cached.is_dir() else []
    if not debs:
        tree = library_upstream(config, git_source)
        with tempfile.TemporaryDirectory(prefix=f"{library.package}-") as scratch:
            work = Path(scratch)
            built = _compile(library, tree, work, _epoch(config))
            deb = _assemble(config, tree, built, work)
            incoming = cached.with_name(f".{cached.name}.incoming")
            shutil.rmtree(incoming, ignore_errors=True)
            incoming.mkdir(parents=True)
            shutil.copyfile(deb, incoming / deb.name)
            shutil.rmtree(cached, ignore_errors=True)
            incoming.rename(cached)
        debs = sorted(cached.glob("*.deb"))
    dist.mkdir(parents=True, exist_ok=True)
    target = dist / debs[0].name
    partial = dist / f".{target.name}.partial"
    shutil.copyfile(debs[0], partial)
    partial.replace(target)
    if lintian:
        from .package import run_lintian

        run_lintian(target)
    return target
