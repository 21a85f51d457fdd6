"""Which convolutions the NPU pads with CNA_PAD_CON1's second byte (QEMU patch 0013), held
against real boards: each reading of the register, computed on the host over every padded
convolution of Mesa's published test models, puts beyond Mesa's tolerance the operations
real boards fail (npuctl's hardware.yaml), or it is refuted."""

from __future__ import annotations

import numpy as np
import pytest

from npuctl.platforms.rocket.hardware import evidence
from rocket_emu import pad_lanes, sources
from rocket_emu.pins import load

MESA_TESTS = sources.mesa_tests_cache(load())


def test_mesas_pad_values_are_one_byte_but_where_a_model_needed_two():
    """rkt_regcmd.c's rule: the zero point less 0x80, sign-extended; both bytes only for a
    zero point of 0 (3x3 kernels and wider) and for a depthwise convolution's 0x8b."""
    assert pad_lanes.mesa_pad_value(132, 3, depthwise=True) == 0x00000004
    assert pad_lanes.mesa_pad_value(125, 3, depthwise=False) == 0xFFFFFFFD
    assert pad_lanes.mesa_pad_value(0, 3, depthwise=False) == 0xFFFF8080
    assert pad_lanes.mesa_pad_value(0, 1, depthwise=False) == 0xFFFFFF80
    assert pad_lanes.mesa_pad_value(0x8B, 3, depthwise=True) == 0x0B0B
    assert pad_lanes.mesa_pad_value(0x8B, 3, depthwise=False) == 0x0B


def test_the_patched_pattern_is_the_capture_s():
    """Over the capture's 64 channels, the odd ones below 32 take the second byte; past 64
    the pattern repeats (patch 0013's reading), which the other readings do not."""
    channels = pad_lanes.second_byte_channels(128, "per-64")
    assert list(np.flatnonzero(channels[:64])) == list(range(1, 32, 2))
    assert list(np.flatnonzero(channels[64:])) == list(range(1, 32, 2))
    assert not pad_lanes.second_byte_channels(128, "first-32")[64:].any()
    assert pad_lanes.second_byte_channels(128, "every-odd")[33]


@pytest.fixture(scope="module")
def predictions(tmp_path_factory) -> dict[str, list[pad_lanes.Prediction]]:
    if not MESA_TESTS.is_dir():
        pytest.skip(sources.NOT_MESA_TESTS)
    from npuctl.platforms.rocket.litert import interpreter

    work = tmp_path_factory.mktemp("pad-lanes")
    return {
        name: pad_lanes.predict(MESA_TESTS / file, work, interpreter)
        for name, file in pad_lanes.MESA_MODELS.items()
    }


def _beyond(found: list[pad_lanes.Prediction], reading: str) -> set[str]:
    return {prediction.operation for prediction in found if prediction.beyond(reading)}


@pytest.mark.parametrize("release", ["26.1", "26.2"])
@pytest.mark.parametrize("model", sorted(pad_lanes.MESA_MODELS))
def test_the_patched_reading_fails_what_real_boards_fail(predictions, release, model):
    """Depthwise only: the operations it puts beyond the tolerance are the ones Mesa's CI
    fails on real boards, no more and no fewer (MobileDet's 086 and 087; none of MobileNet
    V1's, which the boards never fail)."""
    board = evidence().releases[tuple(int(part) for part in release.split("."))].models[model]
    found = predictions[model]
    print(f"\n{model}: " + "; ".join(f"{p.operation} {p.kind} {p.readings}" for p in found))
    assert _beyond(found, pad_lanes.MODELLED) == set(board.fail) - set(board.skip)


def test_a_reading_for_every_convolution_is_refuted_by_real_boards(predictions):
    """Convolutions that are not depthwise, padded with the second byte too, would fail
    operations real boards pass: so the NPU does not pad them so."""
    board = evidence().releases[(26, 2)].models["mobiledet"]
    beyond = _beyond(predictions["mobiledet"], "every convolution")
    passing_on_boards = {number for number in beyond if board.verdict(number) == "pass"}
    assert passing_on_boards, beyond


def test_the_channels_past_64_are_not_settled_by_the_boards(predictions):
    """Every reading of the channels past the capture's 64 fails the same two operations:
    the boards' lists cannot tell them apart (so the emulated board's numbers past 64 are
    patch 0013's choice, and said to be)."""
    found = predictions["mobiledet"]
    readings = [name for name in pad_lanes.READINGS if name.startswith("depthwise")]
    assert {frozenset(_beyond(found, name)) for name in readings} == {frozenset({"086", "087"})}
