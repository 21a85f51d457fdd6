"""A third NPU family, added to a scratch copy of the tree in its own places only
(tests/third_family.py). With no other edit, the tree's own machinery takes it in: make
drivers-data, the packaging pipeline (lintian clean), the kernel lab's list of drivers,
npuctl's discovery, doctor, the NFD labels, cdi generate and k8s render, the npuctl package's
Recommends and descriptions, the family-name lint and the type checker. The kernel lab
builds and boots it on Debian's kernels in tests/test_kernel_lifecycle.py."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest
import yaml

from .conftest import run
from .third_family import (
    COMPATIBLE,
    FAMILY,
    MODULE,
    PACKAGE,
    Scratch,
    build_deb,
    make_scratch,
)

pytestmark = pytest.mark.leaves_a_core_idle


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Scratch:
    return make_scratch(tmp_path_factory.mktemp("third-family"))


def test_make_drivers_data_takes_the_family_in(scratch):
    tree = scratch.tree
    assert scratch.drivers_data.returncode == 0, scratch.drivers_data.stderr
    document = json.loads((tree / "npuctl/src/npuctl/drivers.json").read_text())
    demo = next(d for d in document["drivers"] if d["package"] == PACKAGE)
    assert demo["platform"] == FAMILY and demo["compatibles"] == [COMPATIBLE]
    extras = tomllib.loads((tree / "npuctl/pyproject.toml").read_text())
    extras = extras["project"]["optional-dependencies"]
    assert extras[FAMILY] == ["demo-runtime>=1.0"]
    assert "demo-runtime>=1.0" in extras["families"] and len(extras["families"]) >= 2


def test_the_pipeline_builds_its_package_lintian_clean(scratch):
    if shutil.which("lintian") is None or shutil.which("dpkg-buildpackage") is None:
        pytest.skip("dpkg-dev and lintian are not installed: run 'make deps'")
    deb = build_deb(scratch, scratch.base / "dist")
    listing = run("dpkg-deb", "--contents", deb).stdout
    assert "/usr/src/demo-1.0.0+git20261126" in listing
    assert f"/usr/lib/udev/rules.d/60-{PACKAGE}.rules" in listing
    # The guarded first load comes with every driver package, made from its description.
    assert f"/usr/libexec/{PACKAGE}/module-trial" in listing
    assert f"/usr/lib/modprobe.d/{PACKAGE}-trial.conf" in listing
    assert f"/usr/lib/systemd/system/{PACKAGE}-deferred-load.path" in listing
    assert f"/usr/lib/systemd/system/{PACKAGE}-deferred-load.service" in listing
    control = run("dpkg-deb", "--field", deb, "Package", "Depends").stdout
    assert PACKAGE in control and "dkms" in control


def test_the_kernel_lab_lists_it(scratch):
    script = "from kernel_lab.drivers import DRIVERS; d = DRIVERS['demo-dkms']; " + (
        "print(sorted(DRIVERS), d.module, d.platform_driver, d.distribution_kernels['sky1-linux'])"
    )
    result = scratch.python("-c", script)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("] ")[1].split() == [MODULE, MODULE, "build"]
    assert "'demo-dkms'" in result.stdout
    lab = scratch.python("-m", "kernel_lab", "matrix", "--help")
    assert "default: every package of dkms/" in " ".join(lab.stdout.split())


def test_npuctl_recommends_and_describes_it(scratch):
    script = textwrap.dedent(
        """
        from pipeline.config import load_package, package_names
        from pipeline.npuctl_package import _context
        context = _context(load_package(package_names()[0]), "1")
        print(" | ".join(context["driver_packages"]))
        print(context["descriptions"]["serve"])
        """
    )
    result = scratch.python("-c", script)
    assert result.returncode == 0, result.stderr
    recommends, serve = result.stdout.splitlines()
    assert recommends == "aipu-dkms | demo-dkms | rocket-dkms"
    assert "the demo board (demo)" in serve


def test_the_servers_unit_allows_its_device(scratch):
    script = "from pipeline.npuctl_package import serve_unit; print(serve_unit())"
    result = scratch.python("-c", script)
    assert result.returncode == 0, result.stderr
    allowed = [line for line in result.stdout.splitlines() if line.startswith("DeviceAllow=")]
    assert allowed == ["DeviceAllow=/dev/aipu rw", f"DeviceAllow=/dev/{MODULE} rw",
        "DeviceAllow=char-accel rw"]  # fmt: skip
    assert f"#   {PACKAGE}: /dev/{MODULE}" in result.stdout


def _board(root: Path) -> Path:
    """An arm64 board with the demo NPU's node and its device."""
    files = {
        "proc/sys/kernel/arch": "aarch64",
        "proc/sys/kernel/osrelease": "7.3.4+deb13-arm64",
        "sys/firmware/devicetree/base/compatible": "example,demo-board\0",
        "sys/firmware/devicetree/base/npu@1000/compatible": f"{COMPATIBLE}\0",
        "dev/demo": "",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def _npuctl(scratch: dict, board: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**scratch.env, "NPUCTL_ROOT": str(board), "NPUCTL_MODELS": str(board / "models")}
    return run(sys.executable, "-m", "npuctl", *args, cwd=scratch.tree, env=env)


def test_npuctl_discovers_it_and_every_command_includes_it(scratch, tmp_path):
    board = _board(tmp_path / "board")
    doctor = _npuctl(scratch, board, "doctor", "--json")
    report = json.loads(doctor.stdout)
    assert report["facts"]["platform"] == FAMILY, doctor.stdout
    assert doctor.returncode == 0, doctor.stdout
    assert [(c["id"], c["status"]) for c in report["checks"]] == [("demo.device", "ok")]

    features = tmp_path / "features" / "npuctl"
    _npuctl(scratch, board, "doctor", "--nfd", str(features))
    assert f"npu-family={FAMILY}" in features.read_text()

    spec = _npuctl(scratch, board, "cdi", "generate", "--stdout")
    assert spec.returncode == 0, spec.stderr
    document = yaml.safe_load(spec.stdout)
    assert document["kind"] == "example.org/npu"
    assert document["devices"][0]["containerEdits"]["deviceNodes"][0]["path"] == "/dev/demo"

    manifests = _npuctl(scratch, board, "k8s", "render", "--family", FAMILY)
    assert manifests.returncode == 0, manifests.stderr
    assert "npuctl.io/npu-family: demo" in manifests.stdout
    assert "cdi.k8s.io/npuctl: example.org/npu=0" in manifests.stdout

    unknown = _npuctl(scratch, board, "--platform", "nope", "doctor")
    assert "'nope' is not one of 'zhouyi', 'demo', 'rocket'" in unknown.stderr, unknown.stderr


def test_the_lints_hold_it_to_its_places(scratch):
    lint = scratch.python("-m", "pipeline.family_lint", str(scratch.tree))
    assert lint.returncode == 0, lint.stdout
    pytest.importorskip("mypy", reason="mypy is not installed: run 'make deps'")
    tree = scratch.tree
    files = [
        str(path)
        for pattern in ("npuctl/src/npuctl",)  # as make lint checks it
        for path in sorted(tree.glob(pattern))
    ]
    assert (tree / f"npuctl/src/npuctl/platforms/{FAMILY}/__init__.py").is_file()
    typed = scratch.python("-m", "mypy", "--config-file", str(tree / "tools/pyproject.toml"),
        "--no-incremental", *files,
    )  # fmt: skip
    assert typed.returncode == 0, typed.stdout
