"""What real RK3588 boards compute (the rocket family's hardware.yaml: Mesa's expectations for
its Teflon tests on real boards) against what the project says and the emulated board shows:
teflon.yaml's "what each release computes wrongly" is derived from it in both directions,
and every emulated case that stands for one of Mesa's tests agrees with the boards under
each Teflon or names the blind spots that explain why not (emulation/rk3588.yaml)."""

from __future__ import annotations

import pytest

from npuctl.platforms.rocket import teflon
from npuctl.platforms.rocket.hardware import WHOLE, Evidence, evidence
from rocket_emu import pins

EVIDENCE = evidence()
TEFLON = teflon.description()
PINS = pins.load()
FAILING = ("fail", "crash")


def _verdict(found: Evidence, version: str, test: str) -> str | None:
    """The boards' verdict on one of Mesa's tests (Models.Op/<model>_<NNN or file>) under a
    Teflon version's release; None where the evidence has no such test."""
    release = found.of(version)
    assert release is not None, version
    suite, _, name = test.partition("/")
    assert suite == "Models.Op", test
    model, _, what = name.partition("_")
    if model not in release.models:
        return None
    entry = release.models[model]
    if what == entry.file:
        return entry.verdict()
    return entry.verdict(what) if what.isdigit() and len(what) == 3 else None


def test_every_pinned_teflon_has_the_boards_evidence_of_its_release():
    for build in TEFLON.builds:
        release = EVIDENCE.of(build["version"])
        assert release is not None, f"no hardware evidence for Teflon {build['version']}"
        assert release.lists["fails"]["commit"], build["version"]
        assert set(EVIDENCE.served) == {"ssdlite", "mobilenet", "mobilenet-v2"}


def test_the_boards_evidence_is_read_as_mesa_lists_it():
    """A few tests checked by name: the lists as Mesa's CI keeps them."""
    before, after = "26.1.6-1~bpo13+1", "26.2.6-1"
    for version in (before, after):
        for test in (
            "Models.Op/mobiledet_086",
            "Models.Op/mobiledet_087",
            "Models.Op/mobiledet_ssdlite_mobiledet_coco_qat_postprocess",
            "Models.Op/ssdmobilenetv2_ssd_mobilenet_v2_coco_quant_postprocess",
        ):
            assert _verdict(EVIDENCE, version, test) == "fail", (version, test)
        assert _verdict(EVIDENCE, version, "Models.Op/mobiledet_085") == "pass"
        assert _verdict(EVIDENCE, version, "Models.Op/mobiledet_008") == "skip"  # an ADD
        assert EVIDENCE.served_verdict(version, "mobilenet") == "pass"
    for test in ("Models.Op/mobilenetv2_006", "Models.Op/mobilenetv2_010"):
        assert _verdict(EVIDENCE, before, test) == "fail"
        assert _verdict(EVIDENCE, after, test) == "pass"
    assert EVIDENCE.served_verdict(before, "mobilenet-v2") == "fail"
    assert EVIDENCE.served_verdict(after, "mobilenet-v2") == "pass"
    assert _verdict(EVIDENCE, after, "Models.Op/vww4_vww4_128_128_INT8") == "crash"


@pytest.mark.parametrize("version", [build["version"] for build in TEFLON.builds])
def test_what_a_release_computes_wrongly_is_what_the_boards_show(version):
    """teflon.yaml against hardware.yaml, both ways: each thing a release is said to compute
    wrongly fails on the boards in every test it cites, and a served model the boards
    compute wrongly whole is named; a served model the boards compute right is never named
    (a Teflon bug is not reported where the hardware passes)."""
    wrong = TEFLON.wrong_in(version)
    assert wrong is not None, version
    for item in wrong:
        for test in item.evidence:
            assert _verdict(EVIDENCE, version, test) in FAILING, (version, item.id, test)
    named = {name for item in wrong for name in item.served}
    for served in EVIDENCE.served:
        verdict = EVIDENCE.served_verdict(version, served)
        assert verdict is not None, (version, served)
        assert (served in named) == (verdict in FAILING), (version, served, verdict)


def test_what_the_wanted_teflon_fixes_is_what_the_boards_stop_failing():
    """Of 26.1's wrongs, those 26.2 computes right pass on the boards under 26.2."""
    fixed = TEFLON.fixed_by_wanted("26.1.6-1~bpo13+1")
    assert {item.id for item in fixed} == {"narrow-kernels", "addition-table"}
    for item in fixed:
        for test in item.evidence:
            assert _verdict(EVIDENCE, TEFLON.wanted, test) == "pass", (item.id, test)


HARDWARE_CASES = [case for case in PINS.data["golden_cases"] if "hardware" in case]


def _board(case: dict, version: str) -> str:
    reference = case["hardware"]
    release = EVIDENCE.of(version)
    assert release is not None, version
    model = release.models[reference["model"]]
    return model.verdict(reference["operation"])


@pytest.mark.parametrize(
    ("name", "version"),
    [(case["name"], version) for case in HARDWARE_CASES for version in PINS.teflon_versions],
)
def test_the_emulated_board_agrees_with_real_boards_or_names_its_blind_spot(name, version):
    """A case that stands for one of Mesa's tests (its model whole or one operation): its
    expected verdict under each Teflon is the boards' (agree: pass, differs: fail), or the
    case names the emulator's blind spots that explain the difference, each described in
    emulation/rk3588.yaml; a blind spot is never named where the two agree."""
    case = next(case for case in HARDWARE_CASES if case["name"] == name)
    board = _board(case, version)
    assert board in ("pass", "fail"), f"{name}: the boards do not run that test ({board})"
    emulated = PINS.expectation(case, version)
    agree = (emulated == "agree") == (board == "pass")
    named = case.get("blind_spots", {}).get(version, [])
    assert agree != bool(named), (name, version, emulated, board, named)
    for blind_spot in named:
        assert blind_spot in PINS.data["blind_spots"], blind_spot


def test_the_calibration_points_are_held_to_the_boards():
    """MobileNet V1 (never failing on the boards) and MobileNet V2 (failing under 26.1 only)
    are among the cases held to the boards, and the served detector's lookalike too."""
    models = {case["hardware"]["model"] for case in HARDWARE_CASES}
    assert {"mobilenetv1", "mobilenetv2", "mobiledet"} <= models
    assert all(case["hardware"]["operation"] == WHOLE or case["hardware"]["operation"].isdigit()
               for case in HARDWARE_CASES)  # fmt: skip
