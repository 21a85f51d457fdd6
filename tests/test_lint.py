"""The project's own code stays ruff and shellcheck clean."""

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


def test_shellcheck():
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck is not installed: run 'make deps'")
    result = run("shellcheck", *SHELL_SCRIPTS)
    assert result.returncode == 0, result.stdout
