"""make deb: the npuctl Debian package (needs no upstream tree)."""

import pytest

from .conftest import run
from .test_package import _contents, _field


@pytest.fixture(scope="module")
def npuctl_deb(config, tmp_path_factory):
    from aipu_build.npuctl_package import build_npuctl_package

    artifacts = build_npuctl_package(
        config, tmp_path_factory.mktemp("npuctl-build"), tmp_path_factory.mktemp("npuctl-dist")
    )
    return next(path for path in artifacts if path.suffix == ".deb")


def test_npuctl_package_depends_on_debian_python_packages(npuctl_deb):
    depends = _field(npuctl_deb, "Depends")
    for package in ("python3-click", "python3-numpy", "python3-yaml", "python3-pil"):
        assert package in depends
    assert "python3-ftfy" in _field(npuctl_deb, "Recommends")  # not in Debian 12


def test_npuctl_package_runs_with_system_python(npuctl_deb, tmp_path):
    run("dpkg-deb", "-x", npuctl_deb, tmp_path)
    paths = set(_contents(npuctl_deb))
    assert "/usr/bin/npuctl" in paths
    assert "/usr/share/man/man1/npuctl.1.gz" in paths
    assert any(p.endswith("/npuctl/data/models.yaml") for p in paths)
    result = run(
        "/usr/bin/python3",
        tmp_path / "usr" / "bin" / "npuctl",
        "models",
        "list",
        "--json",
        env={
            "PATH": "/usr/bin:/bin",
            "PYTHONPATH": str(tmp_path / "usr/lib/python3/dist-packages"),
            "HOME": str(tmp_path),
        },
    )
    assert result.returncode == 0, result.stderr
    assert "clip-text" in result.stdout
