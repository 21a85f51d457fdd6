"""The quilt series: DEP-3 headers, zero fuzz, clean round trip, one compat header."""

import re
import shutil
from pathlib import Path

import pytest

from pipeline.config import load_package
from pipeline.errors import BuildError, ExitCode
from pipeline.fetch import git_tree_id
from pipeline.patching import patched_copy, quilt
from pipeline.patching import series as series_of

PATCHES_DIR = load_package("aipu-dkms").patches_dir


def series() -> list[str]:
    return series_of(PATCHES_DIR)


DEP3_FIELDS = ("Description", "Author", "Origin", "Forwarded", "Last-Update")


def _header(name: str) -> str:
    text = (PATCHES_DIR / name).read_text(encoding="utf-8")
    return text[: text.index("\n--- ")]


def _added_lines(name: str) -> dict[str, list[str]]:
    """file -> lines the patch adds."""
    added: dict[str, list[str]] = {}
    current = ""
    for line in (PATCHES_DIR / name).read_text(encoding="utf-8").splitlines():
        if line.startswith("+++ "):
            current = line[4:].split("/", 1)[1]
        elif line.startswith("+") and current:
            added.setdefault(current, []).append(line[1:])
    return added


def test_series_lists_every_patch_once():
    names = series()
    assert len(names) == len(set(names))
    assert sorted(path.name for path in PATCHES_DIR.iterdir()) == sorted([*names, "series"])


def test_patches_are_numbered_in_series_order():
    names = series()
    assert all(re.match(r"^\d{4}-[a-z0-9.-]+\.patch$", name) for name in names)
    assert [int(name[:4]) for name in names] == list(range(1, len(names) + 1))


@pytest.mark.parametrize("name", series())
def test_patch_has_dep3_header(name):
    header = _header(name)
    for field in DEP3_FIELDS:
        assert re.search(rf"(?m)^{field}: \S", header), f"{name} lacks {field}"
    assert re.search(r"(?m)^Last-Update: \d{4}-\d{2}-\d{2}$", header)
    description = re.search(r"(?m)^Description: (.+)$", header)[1]
    assert len(description) <= 80


def test_kernel_version_checks_live_only_in_the_compat_header():
    for name in series():
        for path, lines in _added_lines(name).items():
            if path.endswith("aipu_compat.h"):
                continue
            assert not [line for line in lines if "LINUX_VERSION_CODE" in line], (name, path)


def test_hang_fix_explains_race_and_origin():
    header = _header(next(name for name in series() if "stale-command-pool" in name))
    assert "schedule_v3_job_no_lock" in header
    assert "Bug: https://github.com/orangepi-xunlong/linux-orangepi/issues/127" in header
    assert "n4hy/NPU_OrangePi6Plus" in header


def test_kbuild_defines_the_real_driver_version():
    kbuild = _added_lines(series()[0])["Kbuild"]
    assert "AIPU_KMD_VERSION := 5.11.0" in kbuild
    assert any('-DKMD_VERSION=\\"$(AIPU_KMD_VERSION)\\"' in line for line in kbuild)


@pytest.mark.upstream
def test_series_applies_with_zero_fuzz_and_round_trips(upstream_tree, tmp_path):
    tree = tmp_path / "tree"
    shutil.copytree(upstream_tree, tree)
    pushed = quilt(tree, "push", "-a", "--fuzz=0", patches_dir=PATCHES_DIR)
    assert pushed.returncode == 0, pushed.stdout + pushed.stderr
    assert not re.search(r"offset|fuzz", pushed.stdout, re.IGNORECASE), pushed.stdout
    assert (tree / "Kbuild").exists()
    popped = quilt(tree, "pop", "-a", patches_dir=PATCHES_DIR)
    assert popped.returncode == 0, popped.stdout + popped.stderr
    shutil.rmtree(tree / ".pc")
    assert git_tree_id(tree) == git_tree_id(upstream_tree)


@pytest.mark.upstream
def test_refresh_leaves_every_patch_byte_identical(upstream_tree, tmp_path):
    patches = tmp_path / "patches"
    shutil.copytree(PATCHES_DIR, patches)
    tree = tmp_path / "tree"
    shutil.copytree(upstream_tree, tree)
    for _ in series():
        assert quilt(tree, "push", "--fuzz=0", patches_dir=patches).returncode == 0
        assert quilt(tree, "refresh", patches_dir=patches).returncode == 0
    for name in series():
        assert (patches / name).read_bytes() == (PATCHES_DIR / name).read_bytes(), name


@pytest.mark.upstream
def test_patch_that_does_not_apply_is_one_clear_error(upstream_tree, tmp_path):
    patches = tmp_path / "patches"
    shutil.copytree(PATCHES_DIR, patches)
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
    tree = patched_copy(upstream_tree, tmp_path / "src", PATCHES_DIR)
    assert not (tree / ".pc").exists()
    assert (tree / "armchina-npu" / "aipu_compat.h").exists()
    assert isinstance(tree, Path)
