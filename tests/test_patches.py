"""Every driver package's quilt series: DEP-3 headers, zero fuzz, clean round trip, one compat
header; and what the Zhouyi series (aipu-dkms's and aipu-compass-dkms's) must carry."""

import re
import shutil
from pathlib import Path

import pytest

from pipeline.config import load_package, package_names
from pipeline.errors import BuildError, ExitCode
from pipeline.fetch import find_upstream, git_tree_id
from pipeline.patching import patched_copy, quilt
from pipeline.patching import series as series_of

PACKAGES = package_names()
# The Zhouyi driver lines: the same Sky1 glue, patched for the same kernels.
ZHOUYI = [name for name in PACKAGES if load_package(name).npuctl_platform == "zhouyi"]


def _dir(package: str) -> Path:
    return load_package(package).patches_dir


def series(package: str = "aipu-dkms") -> list[str]:
    return series_of(_dir(package))


EVERY_PATCH = [(package, name) for package in PACKAGES for name in series(package)]
DEP3_FIELDS = ("Description", "Author", "Origin", "Forwarded", "Last-Update")


def _header(package: str, name: str) -> str:
    text = (_dir(package) / name).read_text(encoding="utf-8")
    return text[: text.index("\n--- ")]


def _added_lines(package: str, name: str) -> dict[str, list[str]]:
    """file -> lines the patch adds."""
    added: dict[str, list[str]] = {}
    current = ""
    for line in (_dir(package) / name).read_text(encoding="utf-8").splitlines():
        if line.startswith("+++ "):
            current = line[4:].split("/", 1)[1]
        elif line.startswith("+") and current:
            added.setdefault(current, []).append(line[1:])
    return added


@pytest.fixture(params=PACKAGES)
def package(request) -> str:
    return request.param


def _upstream(package: str) -> Path:
    tree = find_upstream(load_package(package))
    if tree is None:
        pytest.skip(f"{package}'s upstream tree is not in the cache: run 'make fetch'")
    return tree


def test_series_lists_every_patch_once(package):
    names = series(package)
    assert len(names) == len(set(names))
    assert sorted(path.name for path in _dir(package).iterdir()) == sorted([*names, "series"])


def test_patches_are_numbered_in_series_order(package):
    names = series(package)
    assert all(re.match(r"^\d{4}-[a-z0-9.-]+\.patch$", name) for name in names)
    assert [int(name[:4]) for name in names] == list(range(1, len(names) + 1))


@pytest.mark.parametrize(("package", "name"), EVERY_PATCH)
def test_patch_has_dep3_header(package, name):
    header = _header(package, name)
    for field in DEP3_FIELDS:
        assert re.search(rf"(?m)^{field}: \S", header), f"{name} lacks {field}"
    assert re.search(r"(?m)^Last-Update: \d{4}-\d{2}-\d{2}$", header)
    description = re.search(r"(?m)^Description: (.+)$", header)[1]
    assert len(description) <= 80


@pytest.mark.parametrize("zhouyi", ZHOUYI)
def test_kernel_version_checks_live_only_in_the_compat_header(zhouyi):
    for name in series(zhouyi):
        for path, lines in _added_lines(zhouyi, name).items():
            if path.endswith("aipu_compat.h"):
                continue
            assert not [line for line in lines if "LINUX_VERSION_CODE" in line], (name, path)


@pytest.mark.parametrize("zhouyi", ZHOUYI)
def test_hang_fix_explains_race_and_origin(zhouyi):
    fix = next(name for name in series(zhouyi) if "stale-command-pool" in name)
    header = _header(zhouyi, fix)
    assert "schedule_v3_job_no_lock" in header
    assert "Bug: https://github.com/orangepi-xunlong/linux-orangepi/issues/127" in header
    assert "n4hy/NPU_OrangePi6Plus" in header


@pytest.mark.parametrize("zhouyi", ZHOUYI)
def test_kbuild_defines_the_real_driver_version(zhouyi):
    kbuild = _added_lines(zhouyi, series(zhouyi)[0])["Kbuild"]
    assert f"AIPU_KMD_VERSION := {load_package(zhouyi).upstream_version}" in kbuild
    assert any('-DKMD_VERSION=\\"$(AIPU_KMD_VERSION)\\"' in line for line in kbuild)


@pytest.mark.upstream
def test_series_applies_with_zero_fuzz_and_round_trips(package, tmp_path):
    upstream_tree, patches = _upstream(package), _dir(package)
    tree = tmp_path / "tree"
    shutil.copytree(upstream_tree, tree)
    pushed = quilt(tree, "push", "-a", "--fuzz=0", patches_dir=patches)
    assert pushed.returncode == 0, pushed.stdout + pushed.stderr
    assert not re.search(r"offset|fuzz", pushed.stdout, re.IGNORECASE), pushed.stdout
    assert (tree / "Kbuild").exists()
    popped = quilt(tree, "pop", "-a", patches_dir=patches)
    assert popped.returncode == 0, popped.stdout + popped.stderr
    shutil.rmtree(tree / ".pc")
    assert git_tree_id(tree) == git_tree_id(upstream_tree)


@pytest.mark.upstream
def test_refresh_leaves_every_patch_byte_identical(package, tmp_path):
    upstream_tree = _upstream(package)
    patches = tmp_path / "patches"
    shutil.copytree(_dir(package), patches)
    tree = tmp_path / "tree"
    shutil.copytree(upstream_tree, tree)
    for _ in series(package):
        assert quilt(tree, "push", "--fuzz=0", patches_dir=patches).returncode == 0
        assert quilt(tree, "refresh", patches_dir=patches).returncode == 0
    for name in series(package):
        assert (patches / name).read_bytes() == (_dir(package) / name).read_bytes(), name


@pytest.mark.upstream
def test_patch_that_does_not_apply_is_one_clear_error(upstream_tree, tmp_path):
    patches = tmp_path / "patches"
    shutil.copytree(_dir("aipu-dkms"), patches)
    broken = patches / series()[2]
    broken.write_text(
        broken.read_text(encoding="utf-8").replace(
            "static int sky1_npu_remove", "static int no_such_function"
        ),
        encoding="utf-8",
    )
    destination = tmp_path / "out" / "src"
    with pytest.raises(BuildError) as raised:
        patched_copy(upstream_tree, destination, patches)
    assert raised.value.code == ExitCode.PATCH
    assert series()[2] in str(raised.value)
    assert not destination.exists()
    assert list(destination.parent.iterdir()) == []


@pytest.mark.upstream
def test_patched_tree_has_no_quilt_state(upstream_tree, tmp_path):
    tree = patched_copy(upstream_tree, tmp_path / "src", _dir("aipu-dkms"))
    assert not (tree / ".pc").exists()
    assert (tree / "armchina-npu" / "aipu_compat.h").exists()
    assert isinstance(tree, Path)
