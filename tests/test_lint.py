"""The project's own code stays ruff and shellcheck clean."""

import os
import shutil
import sys
from pathlib import Path

import pytest

from .conftest import run

ROOT = Path(__file__).resolve().parents[1]
PYTHON_TREES = ("tools", "tests", "npuctl")
SHELL_SCRIPTS = [
    *sorted((ROOT / "tools").glob("*.sh")),
    ROOT / ".ci" / "run",
    ROOT / "provision/rocket-dkms/initramfs/rocket-dkms",  # an initramfs-tools hook
    ROOT / "tools/rocket_emu/guest/init",  # the emulated board's first process
]

RUFF_CONFIG = ("--config", "tools/pyproject.toml")  # the whole tree's ruff settings


def test_ruff_check():
    result = run(sys.executable, "-m", "ruff", "check", *RUFF_CONFIG, *PYTHON_TREES, cwd=ROOT)
    assert result.returncode == 0, result.stdout


def test_ruff_format():
    result = run(
        sys.executable,
        "-m",
        "ruff",
        "format",
        "--check",
        *RUFF_CONFIG,
        *PYTHON_TREES,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stdout


def test_import_contracts():
    """The boundaries in tools/pyproject.toml's [tool.importlinter]: no cycles in npuctl, no
    family imported by the shared parts, no CLI imported by a family, no server by the core,
    no tests by the tools (each ignored import there is one still to remove)."""
    linter = Path(sys.executable).with_name("lint-imports")
    if not linter.exists():
        pytest.skip("import-linter is not installed: run 'make deps'")
    result = run(linter, "--no-cache", "tools/pyproject.toml", cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_import_contracts_catch_a_cycle(tmp_path: Path):
    """The same contracts fail on a tree whose settings import a family back."""
    linter = Path(sys.executable).with_name("lint-imports")
    if not linter.exists():
        pytest.skip("import-linter is not installed: run 'make deps'")
    tree = tmp_path / "npuctl"
    shutil.copytree(ROOT / "npuctl/src/npuctl", tree, ignore=shutil.ignore_patterns("__pycache__"))
    settings = tree / "settings.py"
    settings.write_text(
        settings.read_text() + "\n\ndef _late():\n    from .platforms.zhouyi import PLATFORM\n"
    )
    config = tmp_path / "contracts.toml"
    config.write_text((ROOT / "tools/pyproject.toml").read_text())
    result = run(
        linter, "--no-cache", str(config), cwd=ROOT, env={**os.environ, "PYTHONPATH": f"{tmp_path}"}
    )
    assert result.returncode != 0
    assert "npuctl.settings -> npuctl.platforms.zhouyi" in result.stdout


def test_shellcheck():
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck is not installed: run 'make deps'")
    result = run("shellcheck", *SHELL_SCRIPTS)
    assert result.returncode == 0, result.stdout
