"""Debian's real arm64 Teflon (mesa-teflon-delegate from trixie-backports) loaded by npuctl's
own delegate probe, in an arm64 Python under qemu-user: without a rocket device it fails
with Teflon's own message on stderr; with a small LD_PRELOAD shim that fakes
/dev/accel/accel0 (driver name "rocket") it creates its delegate. This is the probe the
doctor and 'npuctl run' use, run against the library users install."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest

import arm64_emulation

from .arm64_sysroot import teflon_sysroot
from .conftest import shared_library

SRC = Path(__file__).resolve().parents[2] / "npuctl" / "src"
SHIM = Path(__file__).resolve().parent / "accel_shim" / "accel_shim.c"
PROBE = "npuctl.platforms.rocket.probe"

# npuctl runs here on the sysroot's arm64 Python and packages, not this environment's: the
# run on the oldest supported dependencies ('make test-oldest') leaves these out.
pytestmark = pytest.mark.sysroot_python


@pytest.fixture(scope="module")
def qemu_tools():
    for tool in ("qemu-aarch64", "aarch64-linux-gnu-gcc"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed: run 'make deps'")


@pytest.fixture(scope="module")
def sysroot(qemu_tools):
    return teflon_sysroot()


@pytest.fixture(scope="module")
def shim(qemu_tools, tmp_path_factory):
    target = tmp_path_factory.mktemp("shim") / "accel_shim.so"
    return shared_library(SHIM, target, compiler="aarch64-linux-gnu-gcc")


def probe(sysroot, *qemu_options):
    result = subprocess.run(
        [
            "qemu-aarch64",
            "-L",
            str(sysroot),
            *qemu_options,
            "-E",
            f"PYTHONPATH={SRC}:/usr/lib/python3/dist-packages",
            str(sysroot / "usr/bin/python3"),
            "-m",
            PROBE,
            "delegate",
            "/usr/lib/teflon/libteflon.so",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env=arm64_emulation.environment(),
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1]), result.stderr


def test_the_library_is_debians_teflon_for_arm64(sysroot):
    library = sysroot / "usr/lib/teflon/libteflon.so"
    header = library.read_bytes()[:20]
    assert header[:4] == b"\x7fELF"
    assert int.from_bytes(header[18:20], "little") == 183  # EM_AARCH64


def test_without_a_rocket_device_teflon_says_so_on_stderr(sysroot):
    answer, stderr = probe(sysroot)
    assert answer == {"ok": False, "stage": "create", "error": "the delegate returned no device"}
    assert "Couldn't open kernel device" in stderr


def test_with_the_accel_shim_teflon_creates_its_delegate(sysroot, shim):
    answer, stderr = probe(sysroot, "-E", f"LD_PRELOAD={shim}")
    assert answer == {"ok": True, "stage": "create"}
    assert "Couldn't open kernel device" not in stderr
