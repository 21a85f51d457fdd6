"""libaipudrv as Debian packages it: its own source package from the pinned commit, the
library and its -dev package built from it, a shlibs that binds a program to the 6.1 series,
the copyright of every licence in the orig tarball. (Its rebuild from the .dsc in a clean
chroot is make rebuild-library: docs/driver-lines.md.)"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from pipeline.config import load_package
from pipeline.errors import BuildError
from pipeline.library_package import build_library_package, cached_library_upstream

CROSS = "aarch64-linux-gnu-"


def _run(*argv: str | Path, cwd: Path | None = None) -> str:
    return subprocess.run(
        [str(arg) for arg in argv], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Path]:
    config = load_package("aipu-compass-dkms")
    if shutil.which(f"{CROSS}g++") is None:
        pytest.skip(f"{CROSS}g++ is not installed: run 'make deps'")
    if cached_library_upstream(config) is None:
        pytest.skip("the pinned libaipudrv source is not in the cache: run 'make fetch'")
    dist = tmp_path_factory.mktemp("dist")
    try:
        paths = build_library_package(config, dist, lintian=False)
    except BuildError as error:
        pytest.fail(str(error))
    named = {}
    for path in paths:
        if path.suffix == ".dsc":
            named["dsc"] = path
        elif path.name.startswith("libaipudrv6_"):
            named["lib"] = path
        elif path.name.startswith("libaipudrv-dev_"):
            named["dev"] = path
    root = dist / "root"
    for deb in (named["lib"], named["dev"]):
        _run("dpkg-deb", "-x", deb, root)
    named["root"] = root
    return named


def _field(deb: Path, name: str) -> str:
    return _run("dpkg-deb", "-f", deb, name).strip()


def test_the_source_package_unpacks_with_both_binaries_and_its_rules(built, tmp_path):
    _run("dpkg-source", "-x", built["dsc"], tmp_path / "tree")
    control = (tmp_path / "tree/debian/control").read_text(encoding="utf-8")
    assert control.startswith("Source: libaipudrv\n")
    assert re.findall(r"^Package: (\S+)$", control, re.MULTILINE) == [
        "libaipudrv6",
        "libaipudrv-dev",
    ]
    assert (tmp_path / "tree/debian/rules").stat().st_mode & 0o111
    # The orig tarball is the pinned subtree: the library and the driver whose header it uses.
    assert (tmp_path / "tree/umd/include/standard_api.h").is_file()
    assert (tmp_path / "tree/kmd/armchina-npu/include/armchina_aipu.h").is_file()
    # Every binary says which source package it comes from.
    for deb in (built["lib"], built["dev"]):
        assert _field(deb, "Source") == "libaipudrv"


def test_the_library_recommends_its_kmd_line_and_binds_programs_to_its_series(built):
    assert _field(built["lib"], "Recommends") == (
        "aipu-compass-dkms (>= 6.1), aipu-compass-dkms (<< 6.2~)"
    )
    shlibs = subprocess.run(
        ["dpkg-deb", "--ctrl-tarfile", built["lib"]], check=True, capture_output=True
    ).stdout
    listing = subprocess.run(
        ["tar", "-xO", "./shlibs"], input=shlibs, check=True, capture_output=True
    ).stdout.decode()
    assert listing.strip() == "libaipudrv 6 libaipudrv6 (>= 6.1.0), libaipudrv6 (<< 6.2~)"
    # A future 6.2, whatever its Debian revision, cannot satisfy it; a 6.1 rebuild can.
    for version, satisfies in (("6.2.0+git20270101.abcdef0-1", False), ("6.1.0-2", True)):
        below = subprocess.run(["dpkg", "--compare-versions", version, "lt", "6.2~"]).returncode
        assert (below == 0) == satisfies, version
    soname = _run(
        f"{CROSS}readelf", "-d", built["root"] / "usr/lib/aarch64-linux-gnu/libaipudrv.so.6.1.0"
    )
    assert "Library soname: [libaipudrv.so.6]" in soname


def test_a_program_built_against_the_dev_package_needs_the_versioned_library(built, tmp_path):
    """Upstream's build links with -laipudrv: the -dev package's link and pkg-config file
    serve it, and the program then needs libaipudrv.so.6, the runtime package's file."""
    root = built["root"]
    lib = root / "usr/lib/aarch64-linux-gnu"
    assert (lib / "libaipudrv.so").readlink() == Path("libaipudrv.so.6")
    assert _field(built["dev"], "Depends").startswith(
        f"libaipudrv6 (= {_field(built['lib'], 'Version')})"
    )
    pc = (lib / "pkgconfig/libaipudrv.pc").read_text(encoding="utf-8")
    assert "Libs: -L${libdir} -laipudrv" in pc and "Cflags: -I${includedir}" in pc
    program = tmp_path / "program.cpp"
    program.write_text(
        "#include <standard_api.h>\n"
        "int main() { aipu_ctx_handle_t *ctx = nullptr; return aipu_init_context(&ctx); }\n",
        encoding="utf-8",
    )
    _run(
        f"{CROSS}g++", "-o", tmp_path / "program", program,
        f"-I{root / 'usr/include/aipu'}", f"-L{lib}", "-laipudrv",
        f"-Wl,-rpath-link,{lib}",
    )  # fmt: skip
    needed = _run(f"{CROSS}readelf", "-d", tmp_path / "program")
    assert "Shared library: [libaipudrv.so.6]" in needed


def test_the_copyright_names_every_licence_of_the_orig_tarball(built):
    copyright_text = (built["root"] / "usr/share/doc/libaipudrv6/copyright").read_text()
    stanzas = dict(
        re.findall(
            r"^Files: (.+)\n(?:Copyright: .+\n(?: .+\n)*)License: (.+)$",
            copyright_text,
            re.MULTILINE,
        )
    )
    assert stanzas["*"] == "Apache-2.0"
    assert stanzas["kmd/armchina-npu/include/armchina_aipu.h"] == (
        "GPL-2 with Linux-syscall-note exception"
    )
    assert stanzas["kmd/*"] == "GPL-2"
    assert stanzas["umd/3rdparty/elfio/*"] == "Expat"
    # the holders read from the bundled files' own notices at build time
    assert "Copyright: 2001-present Serge Lamikhov-Center\n" in copyright_text
    assert " 2010-2018 Joe Perches\n" in copyright_text
    assert "does *not* cover user programs that use kernel services" in copyright_text


def test_the_rebuild_takes_the_source_package_the_dsc_names(built, tmp_path):
    """make rebuild-library copies exactly the .dsc's files into its clean chroot."""
    from kernel_lab.rebuild import source_set

    files = source_set(built["dsc"])
    assert [path.name for path in files] == [
        built["dsc"].name,
        built["dsc"].name.replace("-1.dsc", ".orig.tar.xz"),
        built["dsc"].name.replace(".dsc", ".debian.tar.xz"),
    ]
    lonely = tmp_path / built["dsc"].name
    shutil.copyfile(built["dsc"], lonely)
    with pytest.raises(BuildError, match="not a complete source package"):
        source_set(lonely)
