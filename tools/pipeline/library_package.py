"""A user-mode library built from a driver package's pinned upstream commit, for arm64, as a
source package of its own (dkms/<package>.yaml's "library"; debian/library/ is its debian/)
and its binary packages: the library and its -dev package.

The source package is the verified subtree as its orig tarball plus the rendered debian/;
dpkg-buildpackage -a arm64 rebuilds it where the arm64 C++ libraries are installed
(make rebuild-library: a clean chroot). This host has only the cross compiler, not those
multiarch packages dpkg-shlibdeps needs, so make deb compiles with upstream's own Makefile
and the same variables, lays the files out as debian/rules does, writes each control file
from debian/control with dpkg-gencontrol and builds the .debs with dpkg-deb. The result is
cached by its inputs (tree id, build settings, compiler, this file and the templates), so a
second 'make deb' only copies it; lintian checks it either way.
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
from .render import bundled_copyrights, render_file, render_string, upstream_copyrights
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
    own = [Path(__file__), *sorted(path for path in TEMPLATES.rglob("*") if path.is_file())]
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


def _layout(config: Config, tree: Path, built: Path, root: Path) -> None:
    """The installed files as debian/rules' override_dh_auto_install lays them out in
    debian/tmp (the binaries of make deb are built on this host; the source package's rules
    do the same in a build chroot: make rebuild-library)."""
    library = _described(config)
    lib_dir = root / LIBRARY_DIR
    lib_dir.mkdir(parents=True)
    installed = lib_dir / library.file_name
    run(
        [f"{CROSS}strip", "--strip-unneeded", "--remove-section=.comment", "-o", installed, built],
        failure=f"cannot strip {built.name}",
    )
    installed.chmod(0o644)
    (lib_dir / library.soname).symlink_to(library.file_name)
    (lib_dir / library.link_name).symlink_to(library.soname)
    include = root / "usr/include" / library.include_subdir
    include.mkdir(parents=True)
    for header in library.headers:
        shutil.copyfile(tree / header, include / Path(header).name)
        (include / Path(header).name).chmod(0o644)
    pkgconfig = lib_dir / "pkgconfig"
    pkgconfig.mkdir()
    text = render_file(TEMPLATES / "pc.in.j2", source_context(config, tree))
    (pkgconfig / f"{library.pkgconfig_name}.pc").write_text(
        text.replace("@MULTIARCH@", "aarch64-linux-gnu") + ("" if text.endswith("\n") else "\n")
    )


def _binary(config: Config, source: Path, staged: Path, package: str, files: list[str],
            work: Path, substvars: dict[str, str]) -> Path:  # fmt: skip
    """One binary package of the source tree ``source``: ``files`` (globs under ``staged``)
    with the usual doc files, DEBIAN/control from debian/control by dpkg-gencontrol."""
    library = _described(config)
    version = debian_version(config)
    root = work / package
    for pattern in files:
        for path in sorted(staged.glob(pattern)):
            target = root / path.relative_to(staged)
            target.parent.mkdir(parents=True, exist_ok=True)
            if path.is_dir() and not path.is_symlink():
                shutil.copytree(path, target, symlinks=True)
            elif path.is_symlink():
                target.symlink_to(path.readlink())
            else:
                shutil.copy2(path, target)
    doc = root / "usr/share/doc" / package
    doc.mkdir(parents=True)
    overrides = root / "usr/share/lintian/overrides"
    overrides.mkdir(parents=True)
    shutil.copyfile(source / f"debian/{package}.lintian-overrides", overrides / package)
    shutil.copyfile(source / "debian/copyright", doc / "copyright")
    with (
        (doc / "changelog.Debian.gz").open("wb") as raw,
        gzip.GzipFile(
            fileobj=raw, mode="wb", compresslevel=9, mtime=int(_epoch(config)), filename=""
        ) as z,
    ):
        z.write((source / "debian/changelog").read_bytes())
    control = root / "DEBIAN"
    control.mkdir()
    if package == library.package:
        major = library.soname.rsplit(".", 1)[1]
        context = source_context(config, source)
        (control / "shlibs").write_text(
            f"{library.pkgconfig_name} {major} {library.package} (>= {library.version}), "
            f"{library.package} (<< {context['next_minor']}~)\n"
        )
        (control / "triggers").write_text("activate-noawait ldconfig\n")
    sums = [
        f"{hashlib.md5(path.read_bytes()).hexdigest()}  {path.relative_to(root)}"
        for path in sorted(root.rglob("*"))
        if path.is_file() and not path.is_symlink() and control not in path.parents
    ]
    (control / "md5sums").write_text("\n".join(sums) + "\n")
    substvars_file = work / f"{package}.substvars"
    substvars_file.write_text("".join(f"{key}={value}\n" for key, value in substvars.items()))
    run(
        ["dpkg-gencontrol", f"-p{package}", f"-P{root}", f"-T{substvars_file}",
         f"-c{source / 'debian/control'}", f"-l{source / 'debian/changelog'}",
         f"-f{work / 'files'}"],
        failure=f"dpkg-gencontrol could not write {package}'s control file",
        env={**os.environ, "DEB_HOST_ARCH": "arm64", "SOURCE_DATE_EPOCH": _epoch(config)},
    )  # fmt: skip
    for path in root.rglob("*"):
        if not path.is_symlink():
            path.chmod(0o755 if path.is_dir() else (path.stat().st_mode & 0o777) | 0o644)
    deb = work / f"{package}_{version}_arm64.deb"
    run(
        ["dpkg-deb", "--root-owner-group", "-Zxz", "--build", root, deb],
        failure=f"dpkg-deb could not build {deb.name}",
        env={**os.environ, "SOURCE_DATE_EPOCH": _epoch(config)},
    )
    return deb


def _assemble(config: Config, tree: Path, built: Path, source: Path, work: Path) -> list[Path]:
    library = _described(config)
    staged = work / "staged"
    _layout(config, tree, built, staged)
    lib = LIBRARY_DIR
    depends = ", ".join(_depends(staged / lib / library.file_name))
    return [
        _binary(config, source, staged, library.package,
                [f"{lib}/{library.soname}", f"{lib}/{library.file_name}"], work,
                {"shlibs:Depends": depends, "misc:Depends": ""}),
        _binary(config, source, staged, library.dev_package,
                [f"usr/include/{library.include_subdir}", f"{lib}/{library.link_name}",
                 f"{lib}/pkgconfig"], work,
                {"misc:Depends": ""}),
    ]  # fmt: skip


def _upstream_version(config: Config) -> str:
    """6.1.0+git20260112.12b7472: the library's version and the snapshot."""
    return debian_version(config).rsplit("-", 1)[0]


def _next_minor(version: str) -> str:
    major, minor = version.split(".")[:2]
    return f"{major}.{int(minor) + 1}"


def _kmd_line(config: Config) -> str:
    """The driver package of the same release, at its series: what the library speaks."""
    series = ".".join(config.upstream_version.split(".")[:2])
    return f"{config.name} (>= {series}), {config.name} (<< {_next_minor(series)}~)"


def source_context(config: Config, tree: Path) -> dict[str, object]:
    library = _described(config)
    copyrights = sorted(
        {
            line
            for part in ("src", "include")
            for line in upstream_copyrights(tree / library.make_directory / part)
        }
    )
    places = {
        "objects": "$(BUILD)/obj", "output": "$(BUILD)/out", "soname": library.soname,
        "file_name": library.file_name,
    }  # fmt: skip
    return {
        "library": library,
        "version": debian_version(config),
        "maintainer": config.maintainer,
        "homepage": config.homepage,
        "commit": config.upstream.commit,
        "distribution": config.changelog_distribution,
        "date": config.changelog_date,
        "upstream_name": Path(config.upstream.repository).stem,
        "copyrights": copyrights,
        "bundled": [
            {
                **item,
                # a file with no notice of its own is the upstream's (Files: *)
                "copyright": "\n".join(
                    bundled_copyrights(
                        tree, item["files"], [later["files"] for later in library.bundled[at + 1 :]]
                    )
                    or copyrights
                ),
            }
            for at, item in enumerate(library.bundled)
        ],
        "description": render_string(library.description, {"config": config}),
        "make_variables": {
            name: value.format(**places) for name, value in library.make_variables.items()
        },
        "next_minor": _next_minor(library.version),
        "kmd_line": _kmd_line(config),
    }


def render_source_debian(config: Config, tree: Path, debian: Path) -> None:
    """The library's debian/ folder, from debian/library/."""
    library = _described(config)
    context = source_context(config, tree)
    names = {
        "control.j2": "control",
        "rules.j2": "rules",
        "changelog.j2": "changelog",
        "copyright.j2": "copyright",
        "source/format": "source/format",
        "source/lintian-overrides.j2": "source/lintian-overrides",
        "package.install.j2": f"{library.package}.install",
        "dev.install.j2": f"{library.dev_package}.install",
        "pc.in.j2": f"{library.pkgconfig_name}.pc.in",
        "package.lintian-overrides.j2": f"{library.package}.lintian-overrides",
        "dev.lintian-overrides.j2": f"{library.dev_package}.lintian-overrides",
    }
    for template, name in names.items():
        source = TEMPLATES / template
        text = (
            render_file(source, context)
            if source.suffix == ".j2"
            else source.read_text(encoding="utf-8")
        )
        target = debian / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text if text.endswith("\n") else text + "\n", encoding="utf-8")
    (debian / "rules").chmod(0o755)


def source_package(config: Config, tree: Path, work: Path) -> list[Path]:
    """The library's own source package (.dsc, orig tarball, debian tarball) from the
    verified subtree, built with dpkg-source by dpkg-buildpackage -S."""
    from .package import DEBIAN_BUILD_ENV, first_error, write_orig_tarball

    library = _described(config)
    upstream_version = _upstream_version(config)
    top = f"{library.source}-{upstream_version}"
    orig = work / f"{library.source}_{upstream_version}.orig.tar.xz"
    write_orig_tarball(tree, orig, top, int(_epoch_of_date(config)))
    unpacked = work / top
    shutil.copytree(tree, unpacked, symlinks=True)
    render_source_debian(config, tree, unpacked / "debian")
    log = work / "source.log"
    with log.open("w", encoding="utf-8") as output:
        result = run(
            ["dpkg-buildpackage", "-us", "-uc", "-S", "-d"],
            cwd=unpacked, env={**DEBIAN_BUILD_ENV, "SOURCE_DATE_EPOCH": _epoch(config)},
            output=output, check=False, failure="",
        )  # fmt: skip
    stem = f"{library.source}_{debian_version(config)}"
    made = [work / f"{stem}.dsc", orig, work / f"{stem}.debian.tar.xz"]
    if result.returncode != 0 or not all(path.is_file() for path in made):
        raise BuildError(
            f"building the {library.source} source package failed: {first_error(log)} (log: {log})",
            ExitCode.BUILD,
        )
    return [*made, *sorted(work.glob(f"{stem}_source.*"))]


def _changes(config: Config, source: Path, files: list[Path], listed: Path) -> Path:
    """One upload of the source package and its binaries (what make repo publishes)."""
    library = _described(config)
    upload = source.parent
    for path in files:
        if path.parent != upload:
            shutil.copyfile(path, upload / path.name)
    changes = upload / f"{library.source}_{debian_version(config)}_arm64.changes"
    result = run(
        ["dpkg-genchanges", "--build=source,any", "-sa", f"-f{listed}", f"-u{upload}"],
        cwd=source, failure="dpkg-genchanges failed", code=ExitCode.BUILD,
        env={**os.environ, "DEB_HOST_ARCH": "arm64", "SOURCE_DATE_EPOCH": _epoch(config)},
    )  # fmt: skip
    changes.write_text(result.stdout, encoding="utf-8")
    return changes


def _epoch_of_date(config: Config) -> str:
    """The upstream commit's date (the orig tarball's file times)."""
    import datetime as dt

    day = dt.datetime.strptime(config.upstream.date, "%Y%m%d").replace(tzinfo=dt.UTC)
    return str(int(day.timestamp()))


def build_library_package(
    config: Config, dist: Path, *, git_source: str | None = None, lintian: bool = True
) -> list[Path]:
    """The library's source package and its binary packages in ``dist``: from the cache
    when their inputs are unchanged."""
    library = _described(config)
    for tool in ("make", f"{CROSS}g++", f"{CROSS}strip", "dpkg-deb", "dpkg-buildpackage"):
        require_tool(tool)
    cached = cache_root() / "built" / library.source / _inputs_key(config)
    if not (cached.is_dir() and sorted(cached.glob("*.dsc"))):
        tree = library_upstream(config, git_source)
        with tempfile.TemporaryDirectory(prefix=f"{library.source}-") as scratch:
            work = Path(scratch)
            made = source_package(config, tree, work / "source")
            built = _compile(library, tree, work, _epoch(config))
            source = work / "source" / f"{library.source}-{_upstream_version(config)}"
            debs = _assemble(config, tree, built, source, work / "binaries")
            made = [path for path in made if "_source." not in path.name]
            made.append(_changes(config, source, [*made, *debs], work / "binaries" / "files"))
            incoming = cached.with_name(f".{cached.name}.incoming")
            shutil.rmtree(incoming, ignore_errors=True)
            incoming.mkdir(parents=True)
            for path in [*made, *debs]:
                shutil.copyfile(path, incoming / path.name)
            shutil.rmtree(cached, ignore_errors=True)
            incoming.rename(cached)
    dist.mkdir(parents=True, exist_ok=True)
    targets = []
    for path in sorted(cached.iterdir()):
        target = dist / path.name
        partial = dist / f".{target.name}.partial"
        shutil.copyfile(path, partial)
        partial.replace(target)
        targets.append(target)
    if lintian:
        from .package import run_lintian

        for target in targets:
            if target.suffix == ".changes":
                run_lintian(target)
    return targets
