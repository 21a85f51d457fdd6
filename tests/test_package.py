"""make deb: the source and binary packages, their contents and metadata (lintian runs as
part of the build and fails it on any error or warning)."""

import hashlib
import re
import tarfile
from pathlib import Path

import pytest

from aipu_build.fetch import git_tree_id
from aipu_build.package import orig_tarball

from .conftest import run

pytestmark = pytest.mark.upstream


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
        assert {"cix-npu-driver", "sky1-npu-dkms"} <= set(re.split(r",\s*", _field(deb, relation)))


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


def test_udev_rule_and_module_autoload_are_shipped(built_packages):
    paths = set(_contents(built_packages["deb"]))
    assert any(re.match(r"^/(usr/)?lib/udev/rules\.d/\d\d-aipu-dkms\.rules$", p) for p in paths)
    assert "/usr/lib/modules-load.d/aipu.conf" in paths
    assert not any(path.startswith("/etc/") for path in paths)


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
    from aipu_build.errors import BuildError, ExitCode
    from aipu_build.package import build_packages

    monkeypatch.setenv("PATH", str(tmp_path / "empty-path"))
    with pytest.raises(BuildError) as raised:
        build_packages(config, upstream_tree, tmp_path / "build", tmp_path / "dist")
    assert raised.value.code == ExitCode.TOOL
    assert "apt-get install dpkg-dev" in str(raised.value)
    assert not (tmp_path / "build").exists()
    assert not (tmp_path / "dist").exists()
