"""A real board's capture read as tensors (tools/rocket_emu/captures.py): the NPU's int8
feature surfaces, 16 channels to a group, the sign bit flipped."""

from __future__ import annotations

import numpy as np
import pytest

from rocket_emu import captures


def test_a_surface_reads_back_as_the_tensor_it_was_written_from():
    tensor = np.random.default_rng(3).integers(-128, 128, (1, 5, 7, 48), dtype=np.int8)
    surface = captures.tensor_to_surface(tensor)
    assert len(surface) == 5 * 7 * 48
    assert np.array_equal(captures.surface_to_tensor(surface + bytes(64), 5, 7, 48), tensor)


def test_the_layout_is_channel_groups_of_rows_with_the_sign_flipped():
    surface = bytearray(2 * 2 * 2 * 16)
    surface[(1 * 2 * 2 + 1 * 2 + 0) * 16 + 3] = 0x80 ^ 0x05  # group 1, row 1, column 0, lane 3
    tensor = captures.surface_to_tensor(bytes(surface), 2, 2, 32)
    assert tensor[0, 1, 0, 16 + 3] == 5
    assert (tensor == -128).sum() == tensor.size - 1  # a zero byte is int8 -128


def test_a_short_surface_is_refused_in_one_line():
    with pytest.raises(ValueError, match="holds no 8x8x64"):
        captures.surface_to_tensor(bytes(100), 8, 8, 64)
