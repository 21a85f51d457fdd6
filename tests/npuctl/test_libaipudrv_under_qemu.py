"""npuctl's Zhouyi binding driving Arm China's real libaipudrv (the project's libaipudrv6,
built for arm64 from the pinned Compass commit) in an arm64 Python under qemu-user, against a
fake KMD of the 6.1 line (testkit/fake_aipu, compiled with aipu-compass-dkms's own UAPI
header): the calls a session makes at its start (open, topology, target, versions) in the
dialect the binding chose by what the library exports."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

import arm64_emulation
from testkit import zhouyi_uapi
from testkit.fake_aipu import FakeKmd, Unavailable, build, packaged_libaipudrv

from .arm64_sysroot import teflon_sysroot

SRC = Path(__file__).resolve().parents[2] / "npuctl" / "src"
SESSION = """
import json, sys
from npuctl.platforms.zhouyi.noe.binding import NoeLibrary, Session
library = NoeLibrary(sys.argv[1])
with Session(library) as npu:
    print(json.dumps({"dialect": library.dialect.library, "topology": npu.topology(),
                      "target": npu.target(), "versions": npu.versions()}))
"""

pytestmark = pytest.mark.sysroot_python


@pytest.fixture(scope="module")
def libaipudrv(tmp_path_factory) -> Path:
    try:
        return packaged_libaipudrv(tmp_path_factory.mktemp("libaipudrv"))
    except Unavailable as reason:
        pytest.skip(str(reason))


def _session(sysroot: Path, library: Path, kmd: FakeKmd, work: Path) -> dict:
    shim, _ = build(kmd, work)
    log = work / "ioctl.log"
    result = subprocess.run(
        [
            "qemu-aarch64", "-L", str(sysroot),
            "-E", f"LD_PRELOAD={shim}", "-E", f"FAKE_AIPU_LOG={log}",
            "-E", f"PYTHONPATH={SRC}:/usr/lib/python3/dist-packages",
            str(sysroot / "usr/bin/python3"), "-c", SESSION, str(library),
        ],
        capture_output=True, text=True, timeout=600, check=False,
        env=arm64_emulation.environment(),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    answer = json.loads(result.stdout.strip().splitlines()[-1])
    answer["ioctls"] = [line for line in log.read_text().splitlines() if line.startswith("ioctl")]
    return answer


def test_npuctl_opens_the_npu_through_libaipudrv_on_the_6_1_line(libaipudrv, tmp_path):
    sysroot = teflon_sysroot()
    line = next(line for line in zhouyi_uapi.lines() if line.package == "aipu-compass-dkms")
    header = line.header()
    if header is None:
        pytest.skip("aipu-compass-dkms's upstream tree is not in the cache: run 'make fetch'")
    answer = _session(sysroot, libaipudrv, FakeKmd(header, "6.1.0", isa_version=5), tmp_path)
    assert answer["dialect"] == "libaipudrv"
    assert answer["topology"] == {"partitions": 1, "clusters": 1, "cores": 3}
    assert answer["target"] == "X2_1204MP3"
    assert answer["versions"]["kmd"] == "6.1.0"  # asked through AIPU_IOCTL_GET_DRIVER_VERSION
    assert answer["versions"]["umd"].startswith("6.1")
    numbers = {f"{ioctl.number:#x}" for ioctl in zhouyi_uapi.ioctls(header)}
    assert answer["ioctls"] and all(
        call.split("number=")[1].split()[0] in numbers and call.endswith("result=0")
        for call in answer["ioctls"]
    )
