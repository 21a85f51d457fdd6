"""One operation of a published .tflite as a model of its own, as Mesa's Teflon tests run
``Models.Op/<model>_<NNN>``: operation NNN (its place in the file's operator list, from 000)
with its input, its constants (weights, bias) and its output, their shapes, types and
quantization as the file has them. Only what rocket delegates is cut: convolutions and
depthwise convolutions, per-tensor quantized."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path

import flatbuffers
import tflite

from .tflite_models import OpDef, TensorDef, graph_model

BuiltinOptions, Conv2DOptions, DepthwiseConv2DOptions = (
    importlib.import_module(f"tflite.{name}")
    for name in ("BuiltinOptions", "Conv2DOptions", "DepthwiseConv2DOptions")
)
CONV_2D = tflite.BuiltinOperator.CONV_2D
DEPTHWISE_CONV_2D = tflite.BuiltinOperator.DEPTHWISE_CONV_2D
NAMES = {CONV_2D: "CONV_2D", DEPTHWISE_CONV_2D: "DEPTHWISE_CONV_2D"}


@dataclass(frozen=True)
class Operation:
    """What the generated table says of one operation: its place, kind, shapes and scales."""

    index: int
    kind: str
    input_shape: tuple[int, ...]
    weights_shape: tuple[int, ...]
    output_shape: tuple[int, ...]
    input_scale: float
    weights_scale: float
    output_scale: float
    stride: int

    def describe(self) -> str:
        def shape(dims: tuple[int, ...]) -> str:
            return "x".join(map(str, dims))

        return (
            f"{self.kind} {shape(self.input_shape)} -> {shape(self.output_shape)} "
            f"(weights {shape(self.weights_shape)}, stride {self.stride}; scales in "
            f"{self.input_scale:.5g}, weights {self.weights_scale:.5g}, out "
            f"{self.output_scale:.5g})"
        )


def _model(path: Path) -> tflite.Model:
    return tflite.Model.GetRootAsModel(path.read_bytes(), 0)


def _code(model: tflite.Model, operator: tflite.Operator) -> int:
    code = model.OperatorCodes(operator.OpcodeIndex())
    return max(code.BuiltinCode(), code.DeprecatedBuiltinCode())


def _scale(tensor: tflite.Tensor) -> float:
    quantization = tensor.Quantization()
    return float(quantization.Scale(0)) if quantization and quantization.ScaleLength() else 0.0


def delegated(path: Path) -> list[Operation]:
    """The file's convolutions and depthwise convolutions, by their place in it."""
    model = _model(path)
    graph = model.Subgraphs(0)
    found = []
    for index in range(graph.OperatorsLength()):
        operator = graph.Operators(index)
        code = _code(model, operator)
        if code not in NAMES:
            continue
        data, weights, out = (
            graph.Tensors(operator.Inputs(0)),
            graph.Tensors(operator.Inputs(1)),
            graph.Tensors(operator.Outputs(0)),
        )
        options = _options(operator, code)
        found.append(
            Operation(
                index,
                NAMES[code],
                tuple(int(d) for d in data.ShapeAsNumpy()),
                tuple(int(d) for d in weights.ShapeAsNumpy()),
                tuple(int(d) for d in out.ShapeAsNumpy()),
                _scale(data),
                _scale(weights),
                _scale(out),
                int(options.StrideW()),
            )
        )
    return found


def _options(operator: tflite.Operator, code: int):  # noqa: ANN202 (generated classes)
    table = operator.BuiltinOptions()
    kind = (
        Conv2DOptions.Conv2DOptions
        if code == CONV_2D
        else DepthwiseConv2DOptions.DepthwiseConv2DOptions
    )
    options = kind()
    options.Init(table.Bytes, table.Pos)
    return options


def cut(path: Path, index: int, target: Path) -> Path:
    """Operation ``index`` of the model at ``path``, alone, written to ``target``."""
    model = _model(path)
    graph = model.Subgraphs(0)
    operator = graph.Operators(index)
    code = _code(model, operator)
    if code not in NAMES:
        raise ValueError(f"{path.name}: operation {index:03d} is not a convolution")
    options = _options(operator, code)
    tensors = []
    for position in range(operator.InputsLength()):
        tensors.append(
            _tensor(model, graph.Tensors(operator.Inputs(position)), constant=position > 0)
        )
    tensors.append(_tensor(model, graph.Tensors(operator.Outputs(0)), constant=False))

    def build(builder: flatbuffers.Builder) -> int:
        kind = Conv2DOptions if code == CONV_2D else DepthwiseConv2DOptions
        kind.Start(builder)
        kind.AddPadding(builder, options.Padding())
        kind.AddStrideW(builder, options.StrideW())
        kind.AddStrideH(builder, options.StrideH())
        if code == DEPTHWISE_CONV_2D:
            DepthwiseConv2DOptions.AddDepthMultiplier(builder, options.DepthMultiplier())
        kind.AddFusedActivationFunction(builder, options.FusedActivationFunction())
        return kind.End(builder)

    option_type = (
        BuiltinOptions.BuiltinOptions.Conv2DOptions
        if code == CONV_2D
        else BuiltinOptions.BuiltinOptions.DepthwiseConv2DOptions
    )
    last = len(tensors) - 1
    operation = OpDef(code, list(range(last)), [last], (option_type, build))
    return graph_model(target, tensors, [operation], [0], [last], f"{path.stem}_{index:03d}")


def _tensor(model: tflite.Model, tensor: tflite.Tensor, *, constant: bool) -> TensorDef:
    quantization = tensor.Quantization()
    quantized = (
        (float(quantization.Scale(0)), int(quantization.ZeroPoint(0)))
        if quantization and quantization.ScaleLength()
        else None
    )
    if quantization and quantization.ScaleLength() > 1:
        raise ValueError("per-axis quantization: rocket does not delegate it")
    data = model.Buffers(tensor.Buffer()).DataAsNumpy().tobytes() if constant else b""
    return TensorDef(
        tensor.Name().decode(),
        [int(d) for d in tensor.ShapeAsNumpy()],
        tensor.Type(),
        data,
        quantized,
    )
