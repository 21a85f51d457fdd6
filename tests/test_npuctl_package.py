"""make deb: the npuctl Debian package (needs no upstream tree)."""

import gzip
import re

from .conftest import run
from .test_package import _contents, _field


def packaged_npuctl(tree, *args: str):
    """The npuctl the package installs (extracted into ``tree``), on the system's Python."""
    return run(
        "/usr/bin/python3",
        tree / "usr" / "bin" / "npuctl",
        *args,
        env={
            "PATH": "/usr/bin:/bin",
            "PYTHONPATH": str(tree / "usr/lib/python3/dist-packages"),
            "HOME": str(tree),
        },
    )


def test_npuctl_package_depends_on_debian_python_packages(npuctl_deb):
    depends = _field(npuctl_deb, "Depends")
    for package in (
        "python3-click",
        "python3-numpy",
        "python3-yaml",
        "python3-pil",
        "python3-prometheus-client",
    ):
        assert package in depends
    recommends = _field(npuctl_deb, "Recommends")
    assert "python3-ftfy" in recommends  # not in Debian 12
    assert "aipu-dkms | rocket-dkms" in recommends  # the driver of either board
    description = " ".join(_field(npuctl_deb, "Description").split())  # unwrapped
    assert "Orange Pi 6 Plus" in description and "Orange Pi 5 Plus" in description


def test_npuctl_package_runs_with_system_python(npuctl_deb, tmp_path):
    run("dpkg-deb", "-x", npuctl_deb, tmp_path)
    paths = set(_contents(npuctl_deb))
    assert "/usr/bin/npuctl" in paths
    assert "/usr/share/man/man1/npuctl.1.gz" in paths
    for platform in ("zhouyi", "rocket"):
        assert any(p.endswith(f"/npuctl/platforms/{platform}/models.yaml") for p in paths)
    result = packaged_npuctl(tmp_path, "models", "list", "--json")
    assert result.returncode == 0, result.stderr
    assert "clip-text" in result.stdout and "mobilenet" in result.stdout


def test_npuctl_depends_on_the_oldest_tested_versions(npuctl_deb):
    depends = _field(npuctl_deb, "Depends")
    assert "python3-click (>= 8.1.3)" in depends
    assert "python3-numpy (>= 1:1.24.2)" in depends


def test_npuctl_homepage_is_the_project_not_the_driver(npuctl_deb, config):
    homepage = _field(npuctl_deb, "Homepage")
    assert homepage == config.project_homepage
    assert homepage != config.homepage


def test_the_manual_page_covers_every_command_and_the_exit_codes(npuctl_deb, tmp_path):
    from npuctl.cli import COMMANDS
    from npuctl.errors import EXIT_CODES

    run("dpkg-deb", "-x", npuctl_deb, tmp_path)
    page = gzip.decompress((tmp_path / "usr/share/man/man1/npuctl.1.gz").read_bytes()).decode()
    for name in COMMANDS:
        assert f".SS npuctl {name}" in page
    for sub in ("run clip\\-text", "run yolo", "models fetch", "models verify"):
        assert f".SS npuctl {sub}" in page
    exit_status = page.split(".SH EXIT STATUS", 1)[1].split(".SH", 1)[0]
    assert [int(code) for code in re.findall(r"\\fB(\d+)\\fR", exit_status)] == [
        code for code, _ in EXIT_CODES
    ]
    assert "\\-\\-max\\-image\\-pixels" in page


def test_the_serve_unit_is_shipped_hardened_and_not_enabled(npuctl_deb, tmp_path):
    run("dpkg-deb", "-x", npuctl_deb, tmp_path)
    units = [p for p in _contents(npuctl_deb) if p.endswith("/systemd/system/npuctl-serve.service")]
    assert units == ["/usr/lib/systemd/system/npuctl-serve.service"], units
    # Nothing under the aliased /lib (newer lintian: aliased-location).
    assert not [path for path in _contents(npuctl_deb) if path.startswith("/lib/")]
    unit = tmp_path / units[0].lstrip("/")
    text = unit.read_text()
    for line in ("Type=notify", "DynamicUser=yes", "SupplementaryGroups=render", "WatchdogSec="):
        assert line in text
    security = run("systemd-analyze", "security", "--offline=true", "--no-pager", unit)
    exposure = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", security.stdout)
    assert exposure, security.stdout + security.stderr
    assert float(exposure.group(1)) <= 2.0, security.stdout
    control = tmp_path / "control"
    run("dpkg-deb", "-e", npuctl_deb, control)
    postinst = (control / "postinst").read_text()
    assert "npuctl-serve.service" in postinst
    assert "deb-systemd-invoke start" not in postinst  # installed, neither enabled nor started
    result = packaged_npuctl(tmp_path, "serve", "--help")
    assert result.returncode == 0 and "/v1/embeddings" in result.stdout, result.stderr
