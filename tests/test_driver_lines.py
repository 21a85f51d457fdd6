"""The Zhouyi driver lines mapped with evidence (docs/driver-lines.md): each line's ioctl numbers
and every field of the structures they carry, computed by the arm64 compiler from its own UAPI
header (testkit/zhouyi_lines.yaml); the doctor's pair table and the page's statements checked
against them; and the real libnoe of the pinned cix-noe-umd .deb run under qemu-aarch64 against
a fake KMD of each line the project packages."""

from __future__ import annotations

import itertools
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
LAYOUT_BEGIN = "<!-- BEGIN layout table: tests/test_driver_lines.py -->"
LAYOUT_END = "<!-- END layout table -->"
LIST_BEGIN = "<!-- BEGIN same-number list: tests/test_driver_lines.py -->"
LIST_END = "<!-- END same-number list -->"


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
def layouts() -> dict[str, list[zhouyi_uapi.Layout]]:
    _needs_tools()
    return {line.title: zhouyi_uapi.layouts(_header(line)) for line in LINES}


def _documented(begin: str, end: str) -> str:
    text = MAP.read_text(encoding="utf-8")
    return text[text.index(begin) + len(begin) : text.index(end)].strip()


@pytest.fixture(scope="module")
def libnoe(tmp_path_factory) -> Path:
    _needs_tools()
    deb = zhouyi_uapi.umd_deb().cached()
    if deb is None:
        pytest.skip("the pinned cix-noe-umd .deb is not in the cache: run 'make fetch'")
    return unpacked_libnoe(deb, tmp_path_factory.mktemp("cix-noe-umd"))


def test_the_maps_table_is_the_one_both_headers_give(ioctls):
    assert _documented(BEGIN, END) == zhouyi_uapi.table(ioctls).strip(), (
        "docs/driver-lines.md's ioctl table is not what the headers give: replace it with "
        "testkit.zhouyi_uapi.table()"
    )


def test_the_maps_layout_table_is_the_one_the_headers_give(layouts, ioctls):
    assert _documented(LAYOUT_BEGIN, LAYOUT_END) == (
        zhouyi_uapi.layout_table(layouts, ioctls).strip()
    ), (
        "docs/driver-lines.md's layout table is not what the headers give: replace it with "
        "testkit.zhouyi_uapi.layout_table()"
    )
    assert _documented(LIST_BEGIN, LIST_END) == (
        zhouyi_uapi.same_number_list(layouts, ioctls).strip()
    ), "docs/driver-lines.md's same-number list is not testkit.zhouyi_uapi.same_number_list()"


def test_the_layouts_are_read_field_by_field(layouts):
    # The two changes of KMD 6.1 that keep their numbers, as the compiler lays them out.
    compass_4_1, compass_4_2 = (
        {layout.short: layout for layout in layouts[title]} for title in list(layouts)[2:]
    )
    job_6_0, job_6_1 = (
        {field.path: field.offset for field in found["SCHEDULE_JOB"].fields}
        for found in (compass_4_1, compass_4_2)
    )
    assert (job_6_0["job_id"], job_6_1["job_id"]) == (48, 96)
    assert (job_6_0["head_tcb_pa"], job_6_1["head_tcb_pa"]) == (96, 104)
    assert "group_id" in job_6_1 and "group_id" not in job_6_0
    assert compass_4_1["SCHEDULE_JOB"].size == compass_4_2["SCHEDULE_JOB"].size == 144
    buffers = [
        {field.path for field in found["FREE_BUF"].fields} for found in (compass_4_1, compass_4_2)
    ]
    assert buffers[1] - buffers[0] == {"mode"}
    # Nested structures are read too: a partition's clusters inside struct aipu_cap.
    cap = {field.path for field in compass_4_2["QUERY_CAP"].fields}
    assert "partition_cap.clusters[0].core_cnt" in cap


def _pair_rows() -> dict[str, dict]:
    return {pair["kmd"]: pair for pair in yaml.safe_load(PAIRS.read_text())["pairs"]}


def _adjacent(layouts, ioctls):
    titles = list(layouts)
    for before, after in itertools.pairwise(titles):
        changed = zhouyi_uapi.incompatible_at_the_same_number(
            layouts[before], layouts[after], ioctls[before], ioctls[after]
        )
        yield before, after, changed


def test_the_pair_table_keeps_apart_lines_whose_layouts_differ_at_one_number(layouts, ioctls):
    from npuctl.doctor.findings import Status
    from npuctl.platforms.zhouyi.driver_pairs import series, verdict

    rows = _pair_rows()
    checked = 0
    for before, after, changed in _adjacent(layouts, ioctls):
        old, new = (series(zhouyi_uapi.kmd_version(title)) for title in (before, after))
        if not changed or old == new:
            continue
        row = rows[new]
        for short in changed:
            assert short in row["libaipudrv_changed"], (
                f"driver_pairs.yaml's KMD {new} row does not name {short}, whose layout "
                f"changed at the same number against KMD {old}"
            )
        # A user space of either series on the other's KMD: never a working pair.
        for kmd, library in ((f"{new}.0", old), (f"{old}.0", new)):
            judged = verdict(kmd, f"{library}.0", "libaipudrv")
            assert judged.status == Status.FAIL, (kmd, library, judged)
            assert "SCHEDULE_JOB" in judged.summary or "aipu_job_desc" in judged.summary
        checked += 1
    assert checked, "no two lines differ at one number: the 6.0 → 6.1 change is gone"


_MOVED = re.compile(r"`?(\w+)`? from (?:offset )?(\d+)(?![.\d]) to (\d+)(?![.\d])")


def test_the_offsets_the_prose_states_are_the_headers(layouts):
    """Every 'field from offset A to B' the page or the pair table states is a move some
    line makes against the line before it."""
    titles = list(layouts)
    moves = set()
    for before, after in itertools.pairwise(titles):
        old = {(layout.ioctl, field.path): field.offset for layout in layouts[before]
               for field in layout.fields}  # fmt: skip
        for layout in layouts[after]:
            for field in layout.fields:
                was = old.get((layout.ioctl, field.path))
                if was is not None and was != field.offset:
                    moves.add((field.path, was, field.offset))
    stated = [
        (match[1], int(match[2]), int(match[3]))
        for text in (MAP.read_text(encoding="utf-8"), PAIRS.read_text(encoding="utf-8"))
        for match in _MOVED.finditer(" ".join(text.split()))
    ]
    assert stated, "the page states no field's move: the 6.0 → 6.1 evidence is gone"
    for move in stated:
        assert move in moves, (
            f"'{move[0]} from {move[1]} to {move[2]}' is not what the headers give"
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
    pairs = _pair_rows()
    for package in PACKAGED:
        series = ".".join(load_package(package).upstream_version.split(".")[:2])
        assert series in pairs, f"driver_pairs.yaml has no row for {package}'s KMD {series}"
    compass = pairs[".".join(load_package("aipu-compass-dkms").upstream_version.split(".")[:2])]
    assert compass.get("umd") is None  # no libnoe speaks it: the test above
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
