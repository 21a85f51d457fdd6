"""Small .tflite models built at test time with PyPI's `tflite` flatbuffer builders, so the
rocket tests need no downloaded model: an image classifier with MobileNet's interface (uint8
NHWC image in, uint8 scores out, one FULLY_CONNECTED op), a float variant, and a model whose
input is not an image. Weights come from a fixed seed: the same bytes every run."""

from __future__ import annotations

import importlib
from pathlib import Path

import flatbuffers
import numpy as np

# The package's __init__ re-exports the generated classes under the module names; the
# builder functions live in the modules themselves.
(
    Buffer,
    BuiltinOperator,
    BuiltinOptions,
    FullyConnectedOptions,
    Model,
    Operator,
    OperatorCode,
    QuantizationParameters,
    SubGraph,
    Tensor,
    TensorType,
) = (
    importlib.import_module(f"tflite.{name}")
    for name in (
        "Buffer",
        "BuiltinOperator",
        "BuiltinOptions",
        "FullyConnectedOptions",
        "Model",
        "Operator",
        "OperatorCode",
        "QuantizationParameters",
        "SubGraph",
        "Tensor",
        "TensorType",
    )
)


def _vector(builder: flatbuffers.Builder, start, items: list[int], prepend) -> int:
    start(builder, len(items))
    for item in reversed(items):
        prepend(item)
    return builder.EndVector()


def _quantization(builder: flatbuffers.Builder, scale: float, zero_point: int) -> int:
    QuantizationParameters.StartScaleVector(builder, 1)
    builder.PrependFloat32(scale)
    scales = builder.EndVector()
    QuantizationParameters.StartZeroPointVector(builder, 1)
    builder.PrependInt64(zero_point)
    zero_points = builder.EndVector()
    QuantizationParameters.Start(builder)
    QuantizationParameters.AddScale(builder, scales)
    QuantizationParameters.AddZeroPoint(builder, zero_points)
    return QuantizationParameters.End(builder)


def classifier(
    path: Path,
    *,
    size: int = 8,
    classes: int = 10,
    quantized: bool = True,
    image_input: bool = True,
    seed: int = 7,
) -> Path:
    """A one-layer classifier: input [1,size,size,3] (or [1,size*size*3] when not an image),
    output [1,classes]; uint8 with quantization parameters, or float32."""
    rng = np.random.default_rng(seed)
    features = size * size * 3
    if quantized:
        weights = rng.integers(0, 256, (classes, features), dtype=np.uint8)
        bias = rng.integers(-2000, 2000, classes, dtype=np.int32)
        tensor_type, bias_type = TensorType.TensorType.UINT8, TensorType.TensorType.INT32
    else:
        weights = rng.standard_normal((classes, features)).astype(np.float32)
        bias = rng.standard_normal(classes).astype(np.float32)
        tensor_type = bias_type = TensorType.TensorType.FLOAT32
    builder = flatbuffers.Builder(4096)
    offsets = builder.PrependUOffsetTRelative

    buffers = []
    for data in (b"", weights.tobytes(), bias.tobytes(), b"", b""):
        vector = builder.CreateByteVector(data) if data else None
        Buffer.Start(builder)
        if vector is not None:
            Buffer.AddData(builder, vector)
        buffers.append(Buffer.End(builder))

    input_shape = [1, size, size, 3] if image_input else [1, features]
    specs = [  # name, shape, type, buffer, (scale, zero point)
        ("image" if image_input else "features", input_shape, tensor_type, 3, (1 / 128, 128)),
        ("weights", [classes, features], tensor_type, 1, (1 / 256, 128)),
        ("bias", [classes], bias_type, 2, (1 / 128 / 256, 0)),
        ("scores", [1, classes], tensor_type, 4, (0.5, 128)),
    ]
    tensors = []
    for name, shape, kind, buffer, (scale, zero_point) in specs:
        name_offset = builder.CreateString(name)
        shape_offset = _vector(builder, Tensor.StartShapeVector, shape, builder.PrependInt32)
        quantization = _quantization(builder, scale, zero_point) if quantized else None
        Tensor.Start(builder)
        Tensor.AddShape(builder, shape_offset)
        Tensor.AddType(builder, kind)
        Tensor.AddBuffer(builder, buffer)
        Tensor.AddName(builder, name_offset)
        if quantization is not None:
            Tensor.AddQuantization(builder, quantization)
        tensors.append(Tensor.End(builder))

    FullyConnectedOptions.Start(builder)
    options = FullyConnectedOptions.End(builder)
    op_inputs = _vector(builder, Operator.StartInputsVector, [0, 1, 2], builder.PrependInt32)
    op_outputs = _vector(builder, Operator.StartOutputsVector, [3], builder.PrependInt32)
    Operator.Start(builder)
    Operator.AddOpcodeIndex(builder, 0)
    Operator.AddInputs(builder, op_inputs)
    Operator.AddOutputs(builder, op_outputs)
    Operator.AddBuiltinOptionsType(builder, BuiltinOptions.BuiltinOptions.FullyConnectedOptions)
    Operator.AddBuiltinOptions(builder, options)
    operator = Operator.End(builder)

    tensor_vector = _vector(builder, SubGraph.StartTensorsVector, tensors, offsets)
    graph_inputs = _vector(builder, SubGraph.StartInputsVector, [0], builder.PrependInt32)
    graph_outputs = _vector(builder, SubGraph.StartOutputsVector, [3], builder.PrependInt32)
    operators = _vector(builder, SubGraph.StartOperatorsVector, [operator], offsets)
    SubGraph.Start(builder)
    SubGraph.AddTensors(builder, tensor_vector)
    SubGraph.AddInputs(builder, graph_inputs)
    SubGraph.AddOutputs(builder, graph_outputs)
    SubGraph.AddOperators(builder, operators)
    subgraph = SubGraph.End(builder)

    fully_connected = BuiltinOperator.BuiltinOperator.FULLY_CONNECTED
    OperatorCode.Start(builder)
    OperatorCode.AddDeprecatedBuiltinCode(builder, fully_connected)
    OperatorCode.AddBuiltinCode(builder, fully_connected)
    OperatorCode.AddVersion(builder, 1)
    code = OperatorCode.End(builder)

    codes = _vector(builder, Model.StartOperatorCodesVector, [code], offsets)
    subgraphs = _vector(builder, Model.StartSubgraphsVector, [subgraph], offsets)
    buffer_vector = _vector(builder, Model.StartBuffersVector, buffers, offsets)
    description = builder.CreateString("npuctl test classifier")
    Model.Start(builder)
    Model.AddVersion(builder, 3)
    Model.AddOperatorCodes(builder, codes)
    Model.AddSubgraphs(builder, subgraphs)
    Model.AddDescription(builder, description)
    Model.AddBuffers(builder, buffer_vector)
    builder.Finish(Model.End(builder), file_identifier=b"TFL3")
    path.write_bytes(builder.Output())
    return path
