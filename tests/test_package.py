"""make deb: the source and binary packages, their contents and metadata (lintian runs as
part of the build and fails it on any error or warning)."""

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from pipeline.fetch import git_tree_id
from pipeline.package import orig_tarball

from .conftest import run

pytestmark = [pytest.mark.upstream, pytest.mark.leaves_a_core_idle]


def _contents(deb: Path) -> dict[str, str]:
    """path -> permissions of every file in the .deb."""
    listing = run("dpkg-deb", "--contents", deb).stdout
    entries = {}
    for line in listing.splitlines():
        fields = line.split()
        entries[fields[5].removeprefix(".")] = fields[0]
    return entries


def _field(deb: Path, name: str) -> str:
    return run("dpkg-deb", "--field", deb, name).stdout.strip()


def test_binary_package_is_named_after_the_version(built_packages, config):
    assert built_packages["deb"].name == f"aipu-dkms_{config.debian_version}_all.deb"


def test_control_fields(built_packages):
    deb = built_packages["deb"]
    assert _field(deb, "Architecture") == "all"
    assert _field(deb, "Section") == "kernel"
    assert re.search(r"\bdkms\b", _field(deb, "Depends"))
    assert "linux-headers-arm64" in _field(deb, "Recommends")
    for relation in ("Conflicts", "Replaces"):
        # cix-npu-driver by version: cix-drivers-dkms Provides the name (test_takeover.py).
        assert {"cix-npu-driver (<< 2~)", "sky1-npu-dkms"} <= set(
            re.split(r",\s*", _field(deb, relation))
        )


def test_source_is_installed_patched_for_dkms(built_packages, config, tmp_path):
    deb = built_packages["deb"]
    run("dpkg-deb", "-x", deb, tmp_path)
    source = tmp_path / "usr" / "src" / f"aipu-{config.version}"
    dkms_conf = (source / "dkms.conf").read_text(encoding="utf-8")
    assert f'PACKAGE_VERSION="{config.version}"' in dkms_conf
    assert "#MODULE_VERSION#" not in dkms_conf
    assert (source / "Kbuild").exists()
    assert (source / "armchina-npu" / "aipu_compat.h").exists()


def test_nothing_in_the_source_tree_is_executable(built_packages):
    entries = _contents(built_packages["deb"])
    executable = [
        path
        for path, mode in entries.items()
        if path.startswith("/usr/src/") and not mode.startswith("d") and "x" in mode
    ]
    assert executable == []


def test_udev_rule_is_shipped_and_no_modules_load_entry(built_packages):
    paths = set(_contents(built_packages["deb"]))
    # /usr/lib, never the aliased /lib (trixie's lintian: aliased-location); bookworm's udev
    # reads /usr/lib/udev/rules.d too.
    assert "/usr/lib/udev/rules.d/60-aipu-dkms.rules" in paths
    # Runtime PM can stall the NPU on every board: the package keeps it powered.
    assert "/usr/lib/udev/rules.d/61-aipu-dkms-runtime-pm.rules" in paths
    assert not any(path.startswith(("/lib/", "/etc/")) for path in paths)
    # udev loads the module by its ACPI and device-tree aliases (proven in the QEMU boots);
    # a modules-load.d entry would log "Failed to find module" on kernels without it.
    assert not any("modules-load.d" in path for path in paths)


def test_every_load_goes_through_the_trial_guard(built_packages):
    entries = _contents(built_packages["deb"])
    assert entries["/usr/libexec/aipu-dkms/module-trial"].startswith("-rwxr-xr-x")
    assert "/usr/lib/modprobe.d/aipu-dkms-trial.conf" in entries


def test_a_deferred_load_is_retried_by_units_the_maintainer_scripts_enable(
    built_packages, tmp_path
):
    entries = _contents(built_packages["deb"])
    units = "/usr/lib/systemd/system/aipu-dkms-deferred-load"
    # Under /usr/lib on every release (bookworm's debhelper would use the aliased /lib).
    assert f"{units}.path" in entries and f"{units}.service" in entries
    assert not any(path.startswith("/lib/") for path in entries)
    run("dpkg-deb", "-x", built_packages["deb"], tmp_path / "root")
    path_unit = (tmp_path / "root" / f"{units.lstrip('/')}.path").read_text()
    service = (tmp_path / "root" / f"{units.lstrip('/')}.service").read_text()
    assert "PathExistsGlob=/run/aipu-dkms/deferred*" in path_unit
    assert "ExecStart=/usr/libexec/aipu-dkms/module-trial retry" in service
    assert "After=local-fs.target" in service
    run("dpkg-deb", "-e", built_packages["deb"], tmp_path / "control")
    postinst = (tmp_path / "control/postinst").read_text(encoding="utf-8")
    postrm = (tmp_path / "control/postrm").read_text(encoding="utf-8")
    assert "deb-systemd-helper enable 'aipu-dkms-deferred-load.path'" in postinst
    assert "deb-systemd-helper purge 'aipu-dkms-deferred-load.path'" in postrm


def test_appstream_metadata_is_valid(built_packages, config, tmp_path):
    if shutil.which("appstreamcli") is None:
        pytest.skip("appstreamcli is missing: run 'make deps'")
    run("dpkg-deb", "-x", built_packages["deb"], tmp_path)
    metainfo = tmp_path / "usr/share/metainfo" / f"{config.appstream_id}.metainfo.xml"
    result = run("appstreamcli", "validate", "--no-net", "--pedantic", metainfo)
    assert result.returncode == 0, result.stdout
    assert "W:" not in result.stdout and "E:" not in result.stdout


def test_dist_holds_a_complete_upload_set(built_packages):
    """Everything the .changes names is beside it, with the right sizes and checksums, and
    lintian reads it (it refuses a .changes whose .buildinfo is missing)."""
    changes = built_packages["changes"]
    listed = run("dcmd", changes).stdout.split()
    assert any(name.endswith(".buildinfo") for name in listed)
    assert all(Path(name).exists() for name in listed), listed
    verified = run("dscverify", "--no-sig-check", changes)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    linted = run("lintian", "--fail-on", "error,warning", changes)
    assert linted.returncode == 0, linted.stdout + linted.stderr


def test_uapi_header_license_names_the_syscall_note(built_packages, tmp_path):
    run("dpkg-deb", "-x", built_packages["deb"], tmp_path)
    copyright_text = (tmp_path / "usr/share/doc/aipu-dkms/copyright").read_text()
    stanza = copyright_text.split("Files: armchina-npu/include/armchina_aipu.h", 1)[1]
    assert stanza.split("\n\n")[0].count("License: GPL-2 with Linux-syscall-note exception") == 1


@pytest.mark.chroot
def test_newest_lintian_and_appstream_are_clean(built_packages, rocket_packages, tmp_path):
    """trixie's lintian (2.122) and appstreamcli judge both driver packages too, in a chroot."""
    from kernel_lab.lint import lint
    from kernel_lab.suites import SUITES

    from .conftest import require_chroot_support

    require_chroot_support()
    rocket_changes = next(
        path for name, path in rocket_packages.items() if name.endswith(".changes")
    )
    results = lint(SUITES["trixie"], [built_packages["changes"], rocket_changes], tmp_path / "lint")
    assert len(results) == 2
    for result in results:
        assert result.ok, result.lintian_output + result.appstream_output
    result = results[0]
    version = re.search(r"v(\d+)\.(\d+)", result.lintian_version)
    assert version and (int(version[1]), int(version[2])) >= (2, 122), result.lintian_version


def test_maintainer_scripts_register_and_remove_with_dkms(built_packages, tmp_path):
    run("dpkg-deb", "-e", built_packages["deb"], tmp_path)
    postinst = (tmp_path / "postinst").read_text(encoding="utf-8")
    prerm = (tmp_path / "prerm").read_text(encoding="utf-8")
    assert "/usr/lib/dkms/common.postinst" in postinst
    assert re.search(r"dkms remove .*--all", prerm)


def test_orig_tarball_is_the_pinned_upstream_tree(built_packages, config, tmp_path):
    with tarfile.open(built_packages["orig"]) as archive:
        archive.extractall(tmp_path, filter="data")
    assert git_tree_id(tmp_path / config.source_dir_name) == config.upstream.tree_id


def test_orig_tarball_is_reproducible(built_packages, config, upstream_tree, tmp_path):
    again = orig_tarball(config, upstream_tree, tmp_path)
    digest = [
        hashlib.sha256(path.read_bytes()).hexdigest() for path in (again, built_packages["orig"])
    ]
    assert digest[0] == digest[1]


def test_source_package_carries_the_quilt_series(built_packages):
    with tarfile.open(built_packages["debian"]) as archive:
        names = archive.getnames()
    assert "debian/patches/series" in names
    assert "debian/aipu-dkms.dkms" in names
    assert "debian/source/format" in names


def test_changelog_records_the_version(built_packages, config, tmp_path):
    run("dpkg-source", "-x", built_packages["dsc"], tmp_path / "x")
    changelog = run(
        "dpkg-parsechangelog", "-l", tmp_path / "x" / "debian" / "changelog", "-S", "Version"
    ).stdout.strip()
    assert changelog == config.debian_version
    # dpkg-source applied the series with zero fuzz on extraction.
    assert (tmp_path / "x" / "Kbuild").exists()


def test_missing_build_tool_is_one_clear_error(config, upstream_tree, tmp_path, monkeypatch):
    from pipeline.errors import BuildError, ExitCode
    from pipeline.package import build_packages

    monkeypatch.setenv("PATH", str(tmp_path / "empty-path"))
    with pytest.raises(BuildError) as raised:
        build_packages(config, upstream_tree, tmp_path / "build", tmp_path / "dist")
    assert raised.value.code == ExitCode.TOOL
    assert "apt-get install dpkg-dev" in str(raised.value)
    assert not (tmp_path / "build").exists()
    assert not (tmp_path / "dist").exists()


@pytest.mark.chroot
def test_the_autopkgtest_really_builds_for_an_arm64_kernel(built_packages, tmp_path):
    """autopkgtest-pkg-dkms on a testbed with arm64 headers: a build, not a superficial skip."""
    from kernel_lab import autopkgtest
    from kernel_lab.suites import SUITES

    from .conftest import require_chroot_support

    require_chroot_support()
    result = autopkgtest.run(SUITES["trixie"], built_packages["changes"], tmp_path / "apt")
    assert result.ok, (result.returncode, result.verdicts, result.output[-3000:])
    assert result.built_for == [result.kernel]


# The last revision whose npuctl source built one package, npuctl 0.1.0 (serve and watch
# included): the upgrade from it to npuctl + npuctl-serve + npuctl-watch is what users make.
NPUCTL_0_1_0 = "2a6b25a59bd7b24c706233d6ded613a3cc794b46"


def released_npuctl_deb(revision: str, workdir: Path) -> Path:
    """The npuctl .deb of an earlier revision of this repository, built by that revision's
    own pipeline; kept in the cache by its commit (a commit builds one package)."""
    from pipeline.fetch import cache_root

    cached = cache_root() / "released" / revision
    found = sorted(cached.glob("npuctl_*_all.deb")) if cached.is_dir() else []
    if found:
        return found[0]
    deb = _build_released_npuctl_deb(revision, workdir)
    staging = Path(f"{cached}.partial-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    shutil.copyfile(deb, staging / deb.name)
    try:
        staging.rename(cached)  # whole or not at all, beside a run doing the same
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
    return deb


def _build_released_npuctl_deb(revision: str, workdir: Path) -> Path:
    repo = Path(__file__).resolve().parents[1]
    known = subprocess.run(
        ["git", "-C", repo, "cat-file", "-e", f"{revision}^{{commit}}"],
        capture_output=True, check=False,
    )  # fmt: skip
    if known.returncode != 0:
        pytest.skip(f"revision {revision[:12]} (npuctl 0.1.0) is not in this checkout's history")
    source = workdir / "source"
    source.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", repo, "archive", revision], capture_output=True, check=True
    )
    subprocess.run(["tar", "-x", "-C", source], input=archive.stdout, check=True)
    subprocess.run(
        [sys.executable, "-m", "pipeline", "npuctl-deb", "--build-dir", workdir / "build",
         "--dist", workdir / "dist", "--no-lintian"],
        cwd=source, env={**os.environ, "PYTHONPATH": str(source / "tools")},
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    (deb,) = (workdir / "dist").glob("npuctl_*_all.deb")
    return deb


@pytest.mark.chroot
def test_piuparts_installs_upgrades_and_purges_every_package(
    built_packages, config, upstream_tree, rocket_packages, rocket_config, tmp_path
):
    from kernel_lab import piuparts
    from pipeline.npuctl_package import build_npuctl_package
    from pipeline.package import build_packages

    from .conftest import require_chroot_support

    require_chroot_support()
    if shutil.which("piuparts") is None:
        pytest.skip("piuparts is missing: run 'make deps'")

    def deb(artifacts: list[Path]) -> Path:
        return next(path for path in artifacts if path.suffix == ".deb")

    from pipeline.fetch import find_upstream

    following = config.with_local_suffix("lab1")
    previous = [
        built_packages["deb"],
        deb(list(rocket_packages.values())),
        released_npuctl_deb(NPUCTL_0_1_0, tmp_path / "npuctl-0.1.0"),
    ]
    rocket_next = rocket_config.with_local_suffix("lab1")
    latest = [
        deb(
            build_packages(
                rocket_next,
                find_upstream(rocket_config),
                tmp_path / "b4",
                tmp_path / "d4",
                lintian=False,
            )
        ),
        deb(
            build_packages(
                following, upstream_tree, tmp_path / "b2", tmp_path / "d2", lintian=False
            )
        ),
        *(
            path
            for path in build_npuctl_package(
                following, tmp_path / "b3", tmp_path / "d3", lintian=False
            )
            if path.suffix == ".deb"
        ),
    ]
    result = piuparts.run("trixie", latest, tmp_path / "piuparts.log", previous)
    assert result.ok and result.upgraded, result.output[-3000:]
