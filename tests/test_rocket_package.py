"""rocket-dkms: the second driver package, from the same pipeline as aipu-dkms. Its source is
a Debian source package's orig tarball (pinned by sha256, then by the tree id of the paths
taken from it); the package is lintian clean and ships the driver for DKMS."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from pipeline.config import Config, package_names
from pipeline.errors import ExitCode
from pipeline.fetch import cache_root, find_upstream, git_tree_id

from .conftest import run

pytestmark = pytest.mark.leaves_a_core_idle

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def rocket(rocket_config) -> Config:
    return rocket_config


@pytest.fixture(scope="module")
def rocket_tree(rocket: Config) -> Path:
    tree = find_upstream(rocket)
    if tree is None:
        pytest.skip(
            f"rocket source {rocket.upstream.tree_id[:12]} is not in the cache "
            f"({cache_root()}/upstream): run 'make fetch'"
        )
    return tree


@pytest.fixture(scope="module")
def rocket_deb(rocket_packages) -> dict[str, Path]:
    return rocket_packages


def _deb(rocket_deb: dict[str, Path]) -> Path:
    return next(path for path in rocket_deb.values() if path.name.endswith("_all.deb"))


def _field(deb: Path, name: str) -> str:
    return run("dpkg-deb", "--field", deb, name).stdout.strip()


def test_every_driver_package_is_one_folder():
    assert package_names() == ["aipu-compass-dkms", "aipu-dkms", "rocket-dkms"]
    listed = run(sys.executable, "-m", "pipeline", "packages", cwd=ROOT)
    assert listed.stdout.split() == ["aipu-compass-dkms", "aipu-dkms", "rocket-dkms"]


def test_the_source_is_the_pinned_paths_of_debians_linux(rocket: Config, rocket_tree: Path):
    assert rocket.upstream.kind == "debian-source"
    assert rocket.version == "7.2.8"
    assert git_tree_id(rocket_tree) == rocket.upstream.tree_id
    files = sorted(str(path.relative_to(rocket_tree)) for path in rocket_tree.rglob("*.[ch]"))
    assert "drivers/accel/rocket/rocket_drv.c" in files
    assert "include/uapi/drm/rocket_accel.h" in files
    assert all(name.startswith(("drivers/accel/rocket/", "include/uapi/drm/")) for name in files)


@pytest.mark.upstream
def test_package_ships_the_driver_for_dkms(rocket_deb, rocket: Config, tmp_path: Path):
    deb = _deb(rocket_deb)
    assert deb.name == f"rocket-dkms_{rocket.debian_version}_all.deb"
    assert "Conflicts" not in run("dpkg-deb", "--info", deb).stdout
    assert "CONFIG_DRM_ACCEL" in _field(deb, "Description")
    run("dpkg-deb", "-x", deb, tmp_path)
    source = tmp_path / "usr" / "src" / f"rocket-{rocket.version}"
    for relative in ("Kbuild", "dkms.conf", "drivers/accel/rocket/rocket_drv.c",
                     "include/uapi/drm/rocket_accel.h"):  # fmt: skip
        assert (source / relative).is_file(), relative
    dkms_conf = (source / "dkms.conf").read_text(encoding="utf-8")
    assert 'BUILT_MODULE_NAME[0]="rocket"' in dkms_conf
    assert "!CONFIG_DRM_ACCEL_ROCKET" in dkms_conf
    assert "MODULE_VERSION(ROCKET_MODULE_VERSION)" in (
        source / "drivers/accel/rocket/rocket_drv.c"
    ).read_text(encoding="utf-8")
    executable = [
        path for path in source.rglob("*") if path.is_file() and path.stat().st_mode & 0o111
    ]
    assert executable == []
    copyright_text = (tmp_path / "usr/share/doc/rocket-dkms/copyright").read_text()
    stanza = copyright_text.split("Files: include/uapi/drm/rocket_accel.h", 1)[1]
    assert "License: GPL-2 with Linux-syscall-note exception" in stanza.split("\n\n")[0]
    assert (tmp_path / "usr/lib/udev/rules.d/60-rocket-dkms.rules").is_file()
    # Every RK3588 board needs rknpu kept away from the NPU: the package, not an action, does it.
    blacklist = tmp_path / "usr/lib/modprobe.d/rocket-dkms-blacklist-rknpu.conf"
    assert (
        blacklist.read_bytes()
        == (ROOT / "provision/rocket-dkms/rocket-dkms-blacklist-rknpu.conf").read_bytes()
    )
    assert "blacklist rknpu" in blacklist.read_text().splitlines()


@pytest.mark.upstream
def test_the_initramfs_hook_is_shipped_executable_with_its_trigger(rocket_deb, tmp_path: Path):
    deb = _deb(rocket_deb)
    run("dpkg-deb", "-x", deb, tmp_path)
    hook = tmp_path / "usr/share/initramfs-tools/hooks/rocket-dkms"
    assert hook.read_bytes() == (ROOT / "provision/rocket-dkms/initramfs/rocket-dkms").read_bytes()
    assert oct(hook.stat().st_mode)[-3:] == "755"
    # debhelper's dh_installinitramfs: installing or upgrading rebuilds the initramfs.
    control = tmp_path / "control"
    run("dpkg-deb", "-e", deb, control)
    assert "activate-noawait update-initramfs" in (control / "triggers").read_text()
    # The hook's work: force_load (initramfs-tools' hook-functions) lists rocket in
    # conf/modules, so the initramfs loads it before the root file system.
    assert "force_load rocket" in hook.read_text()
    # Only a build that finished its trial from the root file system, and is not held.
    assert "/usr/libexec/rocket-dkms/module-trial verdict" in hook.read_text()
    assert (tmp_path / "usr/libexec/rocket-dkms/module-trial").stat().st_mode & 0o111


@pytest.mark.upstream
def test_orig_tarball_holds_the_pinned_tree(rocket_deb, rocket: Config, tmp_path: Path):
    orig = rocket_deb[f"rocket-dkms_{rocket.version}.orig.tar.xz"]
    with tarfile.open(orig) as archive:
        archive.extractall(tmp_path, filter="data")
    assert git_tree_id(tmp_path / rocket.source_dir_name) == rocket.upstream.tree_id


def _fetch(tmp_path: Path, mirror: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "AIPU_CACHE": str(tmp_path / "cache"), "DEBIAN_MIRROR": mirror}
    return run(sys.executable, "-m", "pipeline", "--package", "rocket-dkms", "fetch", env=env)


def test_a_tarball_that_is_not_the_pinned_one_is_refused(tmp_path: Path, rocket: Config):
    pool = tmp_path / "mirror" / "pool" / "main" / "l" / "linux"
    pool.mkdir(parents=True)
    with tarfile.open(pool / rocket.upstream.source_file, "w:xz") as archive:
        archive.add(ROOT / "README.md", arcname="linux-7.2.8/README")
    result = _fetch(tmp_path, (tmp_path / "mirror").as_uri())
    assert result.returncode == ExitCode.VERIFY, result.stderr
    assert result.stderr.count("\n") == 1
    assert "has sha256" in result.stderr and "nothing was cached" in result.stderr
    assert not any((tmp_path / "cache").rglob("*.orig.tar.xz"))


def test_an_unreachable_archive_is_one_clear_line(tmp_path: Path):
    result = _fetch(tmp_path, (tmp_path / "no-mirror").as_uri())
    assert result.returncode == ExitCode.UPSTREAM, result.stderr
    assert result.stderr.count("\n") == 1
    assert "cannot download" in result.stderr and "DEBIAN_MIRROR" in result.stderr


@pytest.mark.chroot
def test_the_autopkgtest_builds_rocket_for_the_backports_kernel(
    rocket_deb, rocket: Config, tmp_path: Path
):
    """autopkgtest-pkg-dkms where a Debian kernel has the accel core: a real build."""
    from kernel_lab import autopkgtest
    from kernel_lab.suites import SUITES

    from .conftest import require_chroot_support

    require_chroot_support()
    assert rocket.kernel_test_suite == "trixie-backports"
    changes = next(path for path in rocket_deb.values() if path.name.endswith(".changes"))
    result = autopkgtest.run(SUITES[rocket.kernel_test_suite], changes, tmp_path / "apt")
    assert result.ok, (result.returncode, result.verdicts, result.output[-3000:])
    assert result.built_for == [result.kernel]


def test_the_deb_is_reproducible(rocket: Config, rocket_tree: Path, rocket_deb, tmp_path):
    """Byte for byte: the emulated board's cached root is keyed by this .deb's bytes."""
    from pipeline.package import build_packages

    again = build_packages(rocket, rocket_tree, tmp_path / "build", tmp_path / "dist")
    rebuilt = next(path for path in again if path.name.endswith("_all.deb"))
    assert rebuilt.read_bytes() == _deb(rocket_deb).read_bytes()
