"""Which convolutions the NPU pads with the second byte of CNA_PAD_CON1, tried against real
boards: every padded convolution of a published model whose pad value, as Mesa writes it,
has two different low bytes, computed on the host as the NPU would compute it under each
reading of the register, against the CPU interpreter, by Mesa's tolerance.

A real board's capture (emulation/rk3588.yaml: peer_suite, teflon-dw) shows the odd channels
of the first 32 of a depthwise convolution padded with the second byte (QEMU patch 0013).
Whether a convolution that is not depthwise reads it so too, and how the channels past 64
go, one capture cannot say; Mesa's CI on real boards can: the operations a reading puts
beyond the tolerance are the ones real boards must fail (npuctl's hardware.yaml)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from testkit.tflite_cut import Operation, cut, delegated

DEPTHWISE = "DEPTHWISE_CONV_2D"
TOLERANCE = 6  # Mesa's test_teflon.cpp: quantized steps per element

# Mesa's published test models the readings are tried on: its name for each, and its file in
# Mesa's test data.
MESA_MODELS = {
    "mobiledet": "ssdlite_mobiledet_coco_qat_postprocess.tflite",
    "mobilenetv1": "mobilenet_v1_1.0_224_quant.tflite",
}
MODELLED = "depthwise"  # QEMU patch 0013's reading
# Each reading: which convolutions take the second byte, and which of their channels.
READINGS = {
    # depthwise only; the capture's pattern in each group of 64 channels
    MODELLED: ("depthwise", "per-64"),
    "depthwise, the first 32 channels only": ("depthwise", "first-32"),
    "depthwise, every odd channel": ("depthwise", "every-odd"),
    "every convolution": ("every", "per-64"),
}


def mesa_pad_value(zero_point: int, kernel_width: int, depthwise: bool) -> int:
    """CNA_PAD_CON1 as Mesa's rocket driver writes it for a uint8 input (rkt_regcmd.c)."""
    value = 0xFFFF8080 if kernel_width >= 3 and zero_point == 0 else (zero_point - 0x80)
    if depthwise and zero_point == 0x8B:
        value = 0x0B0B
    return value & 0xFFFFFFFF


def second_byte_channels(channels: int, pattern: str) -> np.ndarray:
    """The channels padded with the second byte, by the reading's pattern."""
    channel = np.arange(channels)
    odd = channel % 2 == 1
    if pattern == "per-64":
        return odd & (channel % 64 < 32)
    if pattern == "first-32":
        return odd & (channel < 32)
    return odd


@dataclass(frozen=True)
class Prediction:
    operation: str
    kind: str
    shape: str
    zero_point: int
    pad_value: str
    # per reading: the largest difference from the CPU's output ("largest") and how many
    # elements exceed the tolerance ("beyond")
    readings: dict[str, dict[str, int]]

    def beyond(self, reading: str) -> bool:
        return self.readings[reading]["beyond"] > 0

    def to_json(self) -> dict:
        return asdict(self)


def _padded(
    source: np.ndarray, fill: np.ndarray, top: int, left: int, height: int, width: int
) -> np.ndarray:
    padded = np.empty((height, width, source.shape[2]))
    padded[:] = fill
    rows, columns = min(source.shape[0], height - top), min(source.shape[1], width - left)
    padded[top : top + rows, left : left + columns] = source[:rows, :columns]
    return padded


def _predict_one(
    model: Path, operation: Operation, work: Path, interpreter: Callable, seed: int
) -> Prediction | None:
    index, depthwise, stride = operation.index, operation.kind == DEPTHWISE, operation.stride
    single = cut(model, index, work / f"{model.stem}-{index:03d}.tflite")
    loaded = interpreter(single, None)
    (data,), (out,) = loaded.get_input_details(), loaded.get_output_details()
    ends = (data["index"], out["index"])
    constants = [t for t in loaded.get_tensor_details() if t["index"] not in ends]
    weights_tensor = next(t for t in constants if len(t["shape"]) == 4)
    bias_tensor = next((t for t in constants if len(t["shape"]) == 1), None)
    in_scale, in_zero = data["quantization"]
    out_scale, out_zero = out["quantization"]
    weights_scale, weights_zero = weights_tensor["quantization"]
    weights = loaded.get_tensor(weights_tensor["index"]).astype(float) - weights_zero
    bias = loaded.get_tensor(bias_tensor["index"]).astype(float) if bias_tensor else 0.0
    _, kernel_h, kernel_w, _ = weights.shape
    _, height, width, channels = data["shape"]
    _, out_h, out_w, _ = out["shape"]
    span_h, span_w = (out_h - 1) * stride + kernel_h, (out_w - 1) * stride + kernel_w
    top, left = max(span_h - height, 0) // 2, max(span_w - width, 0) // 2
    if top == 0 and left == 0 and span_h <= height and span_w <= width:
        return None  # reads no padding
    pad = mesa_pad_value(int(in_zero), int(kernel_w), depthwise)
    first, second = pad & 0xFF, (pad >> 8) & 0xFF
    if first == second:
        return None  # either byte pads alike
    rng = np.random.default_rng(seed)
    picture = rng.integers(0, 256, (height, width, channels)).astype(float)
    loaded.set_tensor(data["index"], picture[None].astype(np.uint8))
    loaded.invoke()
    cpu = loaded.get_tensor(out["index"])[0].astype(int)

    def computed(fill: np.ndarray) -> np.ndarray:
        padded = _padded(picture - in_zero, fill - in_zero, top, left, span_h, span_w)
        total = np.zeros((out_h, out_w, weights.shape[0] if not depthwise else channels))
        for row in range(kernel_h):
            for column in range(kernel_w):
                window = padded[
                    row : row + span_h - kernel_h + 1 : stride,
                    column : column + span_w - kernel_w + 1 : stride,
                ]
                if depthwise:
                    total += window * weights[0, row, column]
                else:
                    total += window @ weights[:, row, column, :].T
        scaled = np.round((total + bias) * in_scale * weights_scale / out_scale) + out_zero
        return np.clip(scaled, 0, 255).astype(int)

    # the second byte as the input value it stands for (Mesa's pad is the zero point - 0x80)
    second_value = float(second ^ 0x80)
    readings = {}
    for name, (kinds, pattern) in READINGS.items():
        fill = np.full(channels, float(in_zero))
        if depthwise or kinds == "every":
            fill[second_byte_channels(channels, pattern)] = second_value
        difference = np.abs(computed(fill) - cpu)
        readings[name] = {
            "largest": int(difference.max()),
            "beyond": int((difference > TOLERANCE).sum()),
        }
    return Prediction(
        f"{index:03d}",
        operation.kind,
        f"{height}x{width}x{channels} k{kernel_h} s{stride}",
        int(in_zero),
        f"0x{pad:08x}",
        readings,
    )


def predict(model: Path, work: Path, interpreter: Callable, seed: int = 7) -> list[Prediction]:
    """Each padded convolution of the model whose pad value's two bytes differ, under each
    reading (``interpreter``: npuctl's, loading a .tflite with no delegate)."""
    work.mkdir(parents=True, exist_ok=True)
    found = []
    for operation in delegated(model):
        prediction = _predict_one(model, operation, work, interpreter, seed)
        if prediction is not None:
            found.append(prediction)
    return found
