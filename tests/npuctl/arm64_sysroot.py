"""An arm64 Debian trixie file tree with Mesa's real Teflon from trixie-backports and a Python
(with numpy) to run npuctl's probe and its Zhouyi binding in, for qemu-user. The packages
come from Debian's archive through apt with private lists (the signed Release verifies every
.deb), are cached between runs and are never committed."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from pipeline.fetch import cache_root

SUITE = "trixie"
# The Teflon that drives rocket (Mesa >= 25.3); trixie itself has 25.0.7.
TEFLON = "mesa-teflon-delegate=26.1.6-1~bpo13+1"
PACKAGES = (TEFLON, "python3-minimal", "libpython3.13-stdlib", "python3-click", "python3-numpy")
MIRROR = "http://deb.debian.org/debian"
KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"


def _apt_options(base: Path) -> list[str]:
    return [
        "-oAPT::Architecture=arm64",
        "-oAPT::Architectures::=arm64",
        f"-oDir::Etc::SourceList={base}/sources.list",
        f"-oDir::Etc::SourceParts={base}/parts",
        f"-oDir::Etc::Preferences={base}/preferences",
        f"-oDir::Etc::PreferencesParts={base}/parts",
        f"-oDir::State::Lists={base}/lists",
        f"-oDir::State::status={base}/status",
        f"-oDir::Cache::archives={base}/archives",
        "-oDir::Cache::pkgcache=",
        "-oDir::Cache::srcpkgcache=",
        "-oDebug::NoLocking=1",
    ]


def teflon_sysroot() -> Path:
    """The tree (cached); a skip when the archive cannot be reached."""
    if shutil.which("apt-get") is None or not Path(KEYRING).exists():
        pytest.skip("apt and debian-archive-keyring are needed to fetch arm64 Teflon")
    base = cache_root() / "teflon-arm64"
    root = base / "root"
    stamp = base / "root.packages"
    if stamp.exists() and stamp.read_text() == "\n".join(PACKAGES):
        return root
    for directory in ("lists/partial", "parts", "archives/partial"):
        (base / directory).mkdir(parents=True, exist_ok=True)
    (base / "status").write_text("")
    (base / "preferences").write_text("")
    (base / "sources.list").write_text(
        "".join(
            f"deb [arch=arm64 signed-by={KEYRING}] {MIRROR} {suite} main\n"
            for suite in (SUITE, f"{SUITE}-backports")
        )
    )
    options = _apt_options(base)
    update = subprocess.run(
        ["apt-get", *options, "update", "-q", "-oAPT::Update::Error-Mode=any"],
        capture_output=True,
        text=True,
        check=False,
    )
    if update.returncode != 0:
        pytest.skip(f"Debian's archive is not reachable: {update.stderr.strip()[-200:]}")
    download = subprocess.run(
        [
            "apt-get",
            *options,
            "install",
            "-y",
            "-q",
            "--download-only",
            "--no-install-recommends",
            *PACKAGES,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if download.returncode != 0:
        pytest.fail(
            f"fetching {', '.join(PACKAGES)} failed (is {TEFLON} still in {SUITE}-backports? "
            f"then update the pin in {Path(__file__).name}): {download.stderr.strip()[-300:]}"
        )
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir()
    for deb in sorted((base / "archives").glob("*.deb")):
        subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True)
    for directory in ("bin", "sbin", "lib"):  # the merged-/usr links base-files would make
        if not (root / directory).exists():
            (root / directory).symlink_to(f"usr/{directory}")
    # The links update-alternatives makes in the BLAS and LAPACK packages' postinst (numpy's).
    for library in ("blas/libblas.so.3", "lapack/liblapack.so.3"):
        link = root / "usr/lib/aarch64-linux-gnu" / Path(library).name
        if (link.parent / library).exists() and not link.exists():
            link.symlink_to(library)
    stamp.write_text("\n".join(PACKAGES))
    return root
