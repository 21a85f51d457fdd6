"""A real board's capture: the buffers Teflon gave a board for one int8 model and the output
the board computed (the peer suite's fixtures: emulation/rk3588.yaml: peer_suite.captures),
as tensors. The NPU's feature surfaces are NC1HWC2 (16 int8 channels to a group, rows of
width W) and hold an int8 value with its sign bit flipped (Mesa's unsigned domain)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

GROUP = 16  # int8 channels per C2 group of a feature surface


def surface_to_tensor(surface: bytes, height: int, width: int, channels: int) -> np.ndarray:
    """An NHWC int8 tensor of one image from the first groups of a feature surface."""
    groups = -(-channels // GROUP)
    used = np.frombuffer(surface, np.uint8)[: groups * height * width * GROUP]
    if used.size < groups * height * width * GROUP:
        raise ValueError(f"a surface of {len(surface)} bytes holds no {height}x{width}x{channels}")
    cube = used.reshape(groups, height, width, GROUP).transpose(1, 2, 0, 3)
    flat = cube.reshape(height, width, groups * GROUP)[:, :, :channels]
    return (flat ^ 0x80).view(np.int8)[None]


def tensor_to_surface(tensor: np.ndarray) -> bytes:
    """The inverse, for a tensor whose channels fill whole groups."""
    _, height, width, channels = tensor.shape
    cube = (tensor[0].view(np.uint8) ^ 0x80).reshape(height, width, channels // GROUP, GROUP)
    return cube.transpose(2, 0, 1, 3).tobytes()


def load(folder: Path, capture: dict, shape: tuple[int, int, int]) -> tuple[np.ndarray, np.ndarray]:
    """The capture's input tensor and the board's output tensor (``shape``: H, W, C)."""
    height, width, channels = shape
    return (
        surface_to_tensor((folder / capture["input"]).read_bytes(), height, width, channels),
        surface_to_tensor((folder / capture["output"]).read_bytes(), height, width, channels),
    )
