"""The Zhouyi driver lines mapped with evidence (docs/driver-lines.md): each line's ioctl numbers
computed by the arm64 compiler from its own UAPI header (testkit/zhouyi_lines.yaml), and the
real libnoe of the pinned cix-noe-umd .deb run under qemu-aarch64 against a fake KMD of each
line the project packages."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import yaml

from pipeline.config import load_package
from pipeline.errors import BuildError
from testkit import zhouyi_uapi
from testkit.fake_aipu import FakeKmd, Unavailable, packaged_libaipudrv, run_umd, unpacked_libnoe

REPO = Path(__file__).resolve().parents[1]
MAP = REPO / "docs" / "driver-lines.md"
PAIRS = REPO / "npuctl/src/npuctl/platforms/zhouyi/driver_pairs.yaml"
LINES = zhouyi_uapi.lines()
PACKAGED = {line.package: line for line in LINES if line.package}
BEGIN, END = "<!-- BEGIN ioctl table: tests/test_driver_lines.py -->", "<!-- END ioctl table -->"


def _needs_tools() -> None:
    for tool in (zhouyi_uapi.COMPILER, zhouyi_uapi.EMULATOR):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed: run 'make deps'")


def _header(line: zhouyi_uapi.Line) -> Path:
    header = line.header()
    if header is None:
        pytest.skip(f"the UAPI header of {line.title} is not in the cache: run 'make fetch'")
    return header


def _packaged(package: str) -> Path:
    return _header(PACKAGED[package])


@pytest.fixture(scope="module")
def ioctls() -> dict[str, list[zhouyi_uapi.Ioctl]]:
    _needs_tools()
    return {line.title: zhouyi_uapi.ioctls(_header(line)) for line in LINES}


@pytest.fixture(scope="module")
def libnoe(tmp_path_factory) -> Path:
    _needs_tools()
    deb = zhouyi_uapi.umd_deb().cached()
    if deb is None:
        pytest.skip("the pinned cix-noe-umd .deb is not in the cache: run 'make fetch'")
    return unpacked_libnoe(deb, tmp_path_factory.mktemp("cix-noe-umd"))


def test_the_maps_table_is_the_one_both_headers_give(ioctls):
    text = MAP.read_text(encoding="utf-8")
    documented = text[text.index(BEGIN) + len(BEGIN) : text.index(END)].strip()
    assert documented == zhouyi_uapi.table(ioctls).strip(), (
        "docs/driver-lines.md's ioctl table is not what the headers give: replace it with "
        "testkit.zhouyi_uapi.table()"
    )


def _numbers(found: list[zhouyi_uapi.Ioctl], below: int = 24) -> dict[int, int]:
    return {ioctl.nr: ioctl.number for ioctl in found if ioctl.nr < below}


def test_the_lines_differ_where_a_user_space_talks_first(ioctls):
    cix, compass_4_0, compass_4_1, compass_4_2 = ioctls.values()
    by_name = [{ioctl.short: ioctl for ioctl in found} for found in ioctls.values()]
    # CIX's 5.11 is Arm China's KMD 5.11.0 (Compass 4.0.0) for every call both have ...
    assert _numbers(cix) == _numbers(compass_4_0)
    # ... with two of CIX's own, cache invalidate and flush, where 6.x has other calls.
    assert {"BUF_CACHE_INVALID", "BUF_CACHE_FLUSH"} <= set(by_name[0])
    assert not {"BUF_CACHE_INVALID", "BUF_CACHE_FLUSH"} & set(by_name[1] | by_name[3])
    # KMD 6.0.0 (Compass 4.1.0) and 6.1.0 (4.2.0) share every number 6.0 has.
    assert _numbers(compass_4_1, below=32).items() <= _numbers(compass_4_2, below=32).items()
    # The first call of every user space: 424 bytes up to 5.11, 200 from 6.0, so a KMD of the
    # other side answers ENOTTY.
    assert [names["QUERY_CAP"].size for names in by_name] == [424, 424, 200, 200]
    # The one number all share, to ask a KMD its line before anything else.
    assert {names["GET_DRIVER_VERSION"].number for names in by_name} == {0x80084112}


def test_libnoe_initialises_on_the_5_11_line_it_pairs_with(libnoe, ioctls, tmp_path):
    kmd = FakeKmd(_packaged("aipu-dkms"), "5.11.0", isa_version=5)
    trace = run_umd(kmd, libnoe, "noe", tmp_path)
    assert trace.output[0] == "noe_init_context 0", trace.output
    assert "noe_get_core_count 0 3" in trace.output
    assert "noe_get_target 0 X2_1204MP3" in trace.output  # Arm China's x2: the CD8180's
    numbers = {ioctl.number for ioctl in ioctls[PACKAGED["aipu-dkms"].title]}
    issued = trace.ioctls()
    assert issued and all(int(call["number"], 16) in numbers for call in issued)
    assert all(call["result"] == "0" for call in issued)


def test_libnoe_fails_at_its_first_call_on_the_compass_line(libnoe, tmp_path):
    kmd = FakeKmd(_packaged("aipu-compass-dkms"), "6.1.0", isa_version=5)
    trace = run_umd(kmd, libnoe, "noe", tmp_path)
    assert trace.output[-1] == "noe_init_context 4", trace.output
    assert trace.ioctls() == [
        {"nr": "0", "size": "424", "number": "0x81a84100", "result": "ENOTTY"}
    ]


def test_the_doctors_pair_table_says_what_the_map_shows():
    pairs = {pair["kmd"]: pair for pair in yaml.safe_load(PAIRS.read_text())["pairs"]}
    for package in PACKAGED:
        series = ".".join(load_package(package).upstream_version.split(".")[:2])
        assert series in pairs, f"driver_pairs.yaml has no row for {package}'s KMD {series}"
    compass = pairs[".".join(load_package("aipu-compass-dkms").upstream_version.split(".")[:2])]
    assert compass["umd"] is None  # no libnoe speaks it: the test above
    assert re.search(r"\b200 bytes\b.*\b424\b", " ".join(compass["changed"].split()))


@pytest.fixture(scope="module")
def libaipudrv(tmp_path_factory) -> Path:
    """libaipudrv as the project packages it, unpacked."""
    _needs_tools()
    try:
        return packaged_libaipudrv(tmp_path_factory.mktemp("libaipudrv"))
    except Unavailable as reason:
        pytest.skip(str(reason))
    except BuildError as error:
        pytest.fail(str(error))


@pytest.mark.parametrize("title", [line.title for line in LINES if "6." in line.title])
def test_libaipudrv_initialises_on_the_6_x_lines(libaipudrv, ioctls, title, tmp_path):
    line = next(line for line in LINES if line.title == title)
    trace = run_umd(FakeKmd(_header(line), "6.1.0", isa_version=5), libaipudrv, "aipu", tmp_path)
    assert trace.output[0] == "aipu_init_context 0", trace.output
    assert "aipu_get_core_count 0 3" in trace.output
    assert "aipu_get_target 0 X2_1204MP3" in trace.output
    assert trace.output[-1] == "aipu_deinit_context 0"
    numbers = {ioctl.number for ioctl in ioctls[title]}
    issued = trace.ioctls()
    assert issued and all(int(call["number"], 16) in numbers for call in issued)


@pytest.mark.parametrize("title", [line.title for line in LINES if "5.11" in line.title])
def test_libaipudrv_fails_at_its_first_call_on_the_5_11_lines(libaipudrv, title, tmp_path):
    line = next(line for line in LINES if line.title == title)
    trace = run_umd(FakeKmd(_header(line), "5.11.0", isa_version=5), libaipudrv, "aipu", tmp_path)
    assert trace.output[-1] == "aipu_init_context 4", trace.output
    assert trace.ioctls() == [
        {"nr": "0", "size": "200", "number": "0x80c84100", "result": "ENOTTY"}
    ]
