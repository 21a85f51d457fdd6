"""npuctl supports the versions it declares: the lower bounds in its pyproject.toml are the
oldest versions it is tested with (Debian 12's packages), and 'make test-oldest' runs the
tests on exactly those."""

import importlib.metadata
import os
import re
import tomllib
from pathlib import Path

import pytest

NPUCTL = Path(__file__).resolve().parents[2] / "npuctl"


TEST_CLIENTS = {"pyzmq"}  # pinned to Debian 12's too, but only the tests use them


def constraints() -> dict[str, str]:
    lines = (NPUCTL / "constraints-oldest.txt").read_text().splitlines()
    pins = [line.split("==") for line in lines if line and not line.startswith("#")]
    return {name.lower(): version for name, version in pins}


def dependencies() -> dict[str, str]:
    return {name: version for name, version in constraints().items() if name not in TEST_CLIENTS}


def test_lower_bounds_are_the_oldest_tested_versions():
    """The core's dependencies and those of the parts Debian packages (serve, watch)."""
    project = tomllib.loads((NPUCTL / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    declared = [*project["dependencies"], *extras["serve"], *extras["watch"]]
    floors = dict(
        (name.lower(), version)
        for requirement in declared
        for name, version in re.findall(r"^([\w-]+)>=([\w.]+)$", requirement)
    )
    assert len(floors) == len(declared)
    assert floors == dependencies()
    assert set(constraints()) >= TEST_CLIENTS


def test_the_oldest_versions_are_the_ones_installed():
    if not os.environ.get("NPUCTL_OLDEST_DEPS"):
        pytest.skip("runs in 'make test-oldest', on the oldest supported dependencies")
    installed = {name: importlib.metadata.version(name) for name in constraints()}
    assert installed == constraints()
    with pytest.raises(importlib.metadata.PackageNotFoundError):
        importlib.metadata.version("ftfy")
