"""make deb: the npuctl Debian package (needs no upstream tree)."""

import gzip
import re
from pathlib import Path

from .conftest import run
from .test_package import _contents, _field

REPO = Path(__file__).resolve().parents[1]


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


def _depends(deb) -> set[str]:
    return {re.sub(r" \(.*", "", item.strip()) for item in _field(deb, "Depends").split(",")}


def test_npuctl_package_depends_on_debian_python_packages(npuctl_deb):
    core = {"python3-click", "python3-numpy", "python3-packaging", "python3-jinja2"}
    core |= {"python3-jsonschema"}
    core |= {"python3-pil", "python3-regex", "python3-yaml"}
    assert _depends(npuctl_deb) - {"python3", "python3:any"} == core
    recommends = _field(npuctl_deb, "Recommends")
    assert "python3-ftfy" in recommends  # not in Debian 12
    assert "aipu-dkms | rocket-dkms" in recommends  # the driver of either board
    from pipeline.config import load_package, package_names

    # Every one of dkms/ but a family's alternative driver line, never what apt should pick.
    drivers = [name for name in package_names() if not load_package(name).alternative_to]
    assert recommends.split(",")[0] == " | ".join(drivers)
    assert "aipu-compass-dkms" not in recommends
    assert _field(npuctl_deb, "Suggests") == "npuctl-serve, npuctl-watch"
    description = " ".join(_field(npuctl_deb, "Description").split())  # unwrapped
    assert "Orange Pi 6 Plus" in description and "Orange Pi 5 Plus" in description


def test_serve_and_watch_are_packages_of_their_own(npuctl_debs):
    from pipeline.npuctl_package import npuctl_version

    assert set(npuctl_debs) == {"npuctl", "npuctl-serve", "npuctl-watch"}
    version = npuctl_version()
    own = {"npuctl-serve": {"python3-aiohttp", "python3-prometheus-client"}}
    own["npuctl-watch"] = {"python3-psutil"}
    for name, dependencies in own.items():
        deb = npuctl_debs[name]
        assert _depends(deb) - {"python3:any"} == {"npuctl", *dependencies}
        assert f"npuctl (= {version})" in _field(deb, "Depends")
        # Their files came with the npuctl package before 0.2.0.
        assert _field(deb, "Breaks") == _field(deb, "Replaces") == "npuctl (<< 0.2.0~)"
        part = name.removeprefix("npuctl-")
        modules = [p for p in _contents(deb) if p.endswith(".py")]
        assert modules and all(f"/dist-packages/npuctl/{part}/" in p for p in modules)
        assert not [p for p in _contents(npuctl_debs["npuctl"]) if f"/npuctl/{part}/" in p]
        description = " ".join(_field(deb, "Description").split())
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


def test_the_core_alone_says_which_package_adds_serve_and_watch(npuctl_deb, tmp_path):
    run("dpkg-deb", "-x", npuctl_deb, tmp_path)
    listing = packaged_npuctl(tmp_path, "--help")
    assert listing.returncode == 0, listing.stderr
    unwrapped = " ".join(listing.stdout.split())  # click wraps the help lines
    assert "[not installed: apt install npuctl-serve]" in unwrapped
    assert "[not installed: apt install npuctl-watch]" in unwrapped
    for command, package in (("serve", "npuctl-serve"), ("watch", "npuctl-watch")):
        result = packaged_npuctl(tmp_path, command, "--help")
        assert result.returncode == 2, (result.stdout, result.stderr)
        assert result.stderr.strip().splitlines() == [
            f"npuctl: error: 'npuctl {command}' is not installed: apt install {package} "
            f"(or pip install 'npuctl[{command}]')"
        ]
    doctor = packaged_npuctl(tmp_path, "doctor", "--json")
    assert doctor.returncode in (10, 11) and '"schema": "npuctl-doctor/1"' in doctor.stdout


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


def test_the_serve_unit_is_shipped_hardened_and_not_enabled(npuctl_debs, tmp_path):
    serve_deb = npuctl_debs["npuctl-serve"]
    for deb in npuctl_debs.values():
        run("dpkg-deb", "-x", deb, tmp_path)
    units = [p for p in _contents(serve_deb) if p.endswith("/systemd/system/npuctl-serve.service")]
    assert units == ["/usr/lib/systemd/system/npuctl-serve.service"], units
    # Nothing under the aliased /lib (newer lintian: aliased-location).
    assert not [path for path in _contents(serve_deb) if path.startswith("/lib/")]
    unit = tmp_path / units[0].lstrip("/")
    text = unit.read_text()
    from pipeline.npuctl_package import serve_unit

    assert text == serve_unit()  # provision/npuctl-serve's template, rendered
    for line in ("Type=notify", "DynamicUser=yes", "SupplementaryGroups=render", "WatchdogSec="):
        assert line in text
    security = run("systemd-analyze", "security", "--offline=true", "--no-pager", unit)
    exposure = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", security.stdout)
    assert exposure, security.stdout + security.stderr
    assert float(exposure.group(1)) <= 2.0, security.stdout
    control = tmp_path / "control"
    run("dpkg-deb", "-e", serve_deb, control)
    postinst = (control / "postinst").read_text()
    assert "npuctl-serve.service" in postinst
    assert "deb-systemd-invoke start" not in postinst  # installed, neither enabled nor started
    result = packaged_npuctl(tmp_path, "serve", "--help")
    assert result.returncode == 0 and "/v1/embeddings" in result.stdout, result.stderr
