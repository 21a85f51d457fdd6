"""Commands whose part is not installed (npuctl-serve, npuctl-watch; the 'serve' and 'watch'
extras) say which package adds them, in one line, with exit code 2."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SOURCE = Path(__file__).resolve().parents[2] / "npuctl" / "src" / "npuctl"


def npuctl(pythonpath: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "npuctl", *args],
        env={**os.environ, "PYTHONPATH": str(pythonpath), "HOME": str(pythonpath)},
        cwd=pythonpath,
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.fixture
def core_only(tmp_path: Path) -> Path:
    """The npuctl package as the Debian core package installs it: serve/ and watch/ absent."""
    shutil.copytree(
        SOURCE,
        tmp_path / "npuctl",
        ignore=shutil.ignore_patterns("serve", "watch", "__pycache__"),
        symlinks=False,
    )
    return tmp_path


@pytest.mark.parametrize(
    ("command", "package"), [("serve", "npuctl-serve"), ("watch", "npuctl-watch")]
)
def test_a_part_not_installed_names_its_package(core_only, command, package):
    result = npuctl(core_only, command, "--port", "0")
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert result.stderr.splitlines() == [
        f"npuctl: error: 'npuctl {command}' is not installed: apt install {package} "
        f"(or pip install 'npuctl[{command}]')"
    ]
    listing = " ".join(npuctl(core_only, "--help").stdout.split())
    assert f"[not installed: apt install {package}]" in listing


def test_the_core_runs_without_the_parts(core_only):
    result = npuctl(core_only, "models", "list", "--json")
    assert result.returncode == 0, result.stderr
    assert "mobilenet" in result.stdout


@pytest.mark.parametrize(("command", "dependency"), [("serve", "aiohttp"), ("watch", "psutil")])
def test_a_part_without_its_dependency_names_it(tmp_path, command, dependency):
    """The part's modules are there, a library it needs is not (a pip install without the
    extra)."""
    (tmp_path / dependency).mkdir()
    message = f"No module named {dependency!r}"
    (tmp_path / dependency / "__init__.py").write_text(
        f"raise ModuleNotFoundError({message!r}, name={dependency!r})\n"
    )
    shutil.copytree(SOURCE, tmp_path / "npuctl", ignore=shutil.ignore_patterns("__pycache__"))
    result = npuctl(tmp_path, command, "--help")
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert result.stderr.splitlines() == [
        f"npuctl: error: 'npuctl {command}' needs {dependency}: apt install npuctl-{command} "
        f"(or pip install 'npuctl[{command}]')"
    ]
    listing = " ".join(npuctl(tmp_path, "--help").stdout.split())
    assert "not installed" not in listing  # the part is there; only running it says more
