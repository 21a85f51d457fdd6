"""Small .tflite models built at test time with PyPI's `tflite` flatbuffer builders, so the
rocket tests need no downloaded model: an image classifier with MobileNet's interface (uint8
NHWC image in, uint8 scores out, one FULLY_CONNECTED op), a float variant, a model whose
input is not an image, and an SSD detector ending in TFLite's detection post-processing op.
Weights come from a fixed seed: the same bytes every run."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import flatbuffers
import numpy as np
from flatbuffers import flexbuffers

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


def _vector(
    builder: flatbuffers.Builder,
    start: Callable[..., object],
    items: list[int],
    prepend: Callable[..., object],
) -> int:
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
    input_shape = [1, size, size, 3] if image_input else [1, features]

    def quantization(scale: float, zero_point: int) -> tuple[float, int] | None:
        return (scale, zero_point) if quantized else None

    tensors = [
        TensorDef(
            "image" if image_input else "features",
            input_shape,
            tensor_type,
            quantization=quantization(1 / 128, 128),
        ),
        TensorDef(
            "weights",
            [classes, features],
            tensor_type,
            weights.tobytes(),
            quantization(1 / 256, 128),
        ),
        TensorDef("bias", [classes], bias_type, bias.tobytes(), quantization(1 / 128 / 256, 0)),
        TensorDef("scores", [1, classes], tensor_type, quantization=quantization(0.5, 128)),
    ]
    fully_connected = OpDef(
        BuiltinOperator.BuiltinOperator.FULLY_CONNECTED,
        [0, 1, 2],
        [3],
        (BuiltinOptions.BuiltinOptions.FullyConnectedOptions, _fully_connected),
    )
    return graph_model(path, tensors, [fully_connected], [0], [3], "npuctl test classifier")


# -- a general builder: tensors and operators as data -------------------------------------
Pool2DOptions = importlib.import_module("tflite.Pool2DOptions")


@dataclass
class TensorDef:
    name: str
    shape: list[int]
    kind: int  # TensorType
    data: bytes = b""  # a constant's bytes
    quantization: tuple[float, int] | None = None


@dataclass
class OpDef:
    code: int | str  # a BuiltinOperator, or a custom op's name
    inputs: list[int]
    outputs: list[int]
    options: tuple[int, Callable[[flatbuffers.Builder], int]] | None = None  # (type, build)
    custom_options: bytes = b""


def graph_model(
    path: Path,
    tensors: list[TensorDef],
    operators: list[OpDef],
    inputs: list[int],
    outputs: list[int],
    description: str,
) -> Path:
    builder = flatbuffers.Builder(65536)
    offsets = builder.PrependUOffsetTRelative
    buffers = [_buffer(builder, data) for data in [b"", *(tensor.data for tensor in tensors)]]
    made = [_tensor(builder, tensor, number + 1) for number, tensor in enumerate(tensors)]
    codes: list[int | str] = []
    for operator in operators:
        if operator.code not in codes:
            codes.append(operator.code)
    ops = [_operator(builder, operator, codes.index(operator.code)) for operator in operators]
    tensor_vector = _vector(builder, SubGraph.StartTensorsVector, made, offsets)
    graph_inputs = _vector(builder, SubGraph.StartInputsVector, inputs, builder.PrependInt32)
    graph_outputs = _vector(builder, SubGraph.StartOutputsVector, outputs, builder.PrependInt32)
    operator_vector = _vector(builder, SubGraph.StartOperatorsVector, ops, offsets)
    SubGraph.Start(builder)
    SubGraph.AddTensors(builder, tensor_vector)
    SubGraph.AddInputs(builder, graph_inputs)
    SubGraph.AddOutputs(builder, graph_outputs)
    SubGraph.AddOperators(builder, operator_vector)
    subgraph = SubGraph.End(builder)
    code_offsets = [_operator_code(builder, code) for code in codes]
    return _write_model(builder, offsets, code_offsets, subgraph, buffers, description, path)


def _buffer(builder: flatbuffers.Builder, data: bytes) -> int:
    vector = builder.CreateByteVector(data) if data else None
    Buffer.Start(builder)
    if vector is not None:
        Buffer.AddData(builder, vector)
    return Buffer.End(builder)


def _tensor(builder: flatbuffers.Builder, tensor: TensorDef, buffer: int) -> int:
    name_offset = builder.CreateString(tensor.name)
    shape_offset = _vector(builder, Tensor.StartShapeVector, tensor.shape, builder.PrependInt32)
    quantization = _quantization(builder, *tensor.quantization) if tensor.quantization else None
    Tensor.Start(builder)
    Tensor.AddShape(builder, shape_offset)
    Tensor.AddType(builder, tensor.kind)
    Tensor.AddBuffer(builder, buffer)
    Tensor.AddName(builder, name_offset)
    if quantization is not None:
        Tensor.AddQuantization(builder, quantization)
    return Tensor.End(builder)


def _operator(builder: flatbuffers.Builder, operator: OpDef, code_index: int) -> int:
    options = operator.options[1](builder) if operator.options else None
    custom = builder.CreateByteVector(operator.custom_options) if operator.custom_options else None
    op_inputs = _vector(builder, Operator.StartInputsVector, operator.inputs, builder.PrependInt32)
    op_outputs = _vector(
        builder, Operator.StartOutputsVector, operator.outputs, builder.PrependInt32
    )
    Operator.Start(builder)
    Operator.AddOpcodeIndex(builder, code_index)
    Operator.AddInputs(builder, op_inputs)
    Operator.AddOutputs(builder, op_outputs)
    if operator.options and options is not None:
        Operator.AddBuiltinOptionsType(builder, operator.options[0])
        Operator.AddBuiltinOptions(builder, options)
    if custom is not None:
        Operator.AddCustomOptions(builder, custom)
    return Operator.End(builder)


def _operator_code(builder: flatbuffers.Builder, code: int | str) -> int:
    custom_name = builder.CreateString(code) if isinstance(code, str) else None
    builtin = BuiltinOperator.BuiltinOperator.CUSTOM if isinstance(code, str) else code
    OperatorCode.Start(builder)
    OperatorCode.AddDeprecatedBuiltinCode(builder, min(builtin, 127))
    OperatorCode.AddBuiltinCode(builder, builtin)
    if custom_name is not None:
        OperatorCode.AddCustomCode(builder, custom_name)
    OperatorCode.AddVersion(builder, 1)
    return OperatorCode.End(builder)


def _write_model(
    builder: flatbuffers.Builder,
    offsets: Callable[..., object],
    codes: list[int],
    subgraph: int,
    buffers: list[int],
    description: str,
    path: Path,
) -> Path:
    """The model table around one subgraph, written to ``path``."""
    code_vector = _vector(builder, Model.StartOperatorCodesVector, codes, offsets)
    subgraphs = _vector(builder, Model.StartSubgraphsVector, [subgraph], offsets)
    buffer_vector = _vector(builder, Model.StartBuffersVector, buffers, offsets)
    description_offset = builder.CreateString(description)
    Model.Start(builder)
    Model.AddVersion(builder, 3)
    Model.AddOperatorCodes(builder, code_vector)
    Model.AddSubgraphs(builder, subgraphs)
    Model.AddDescription(builder, description_offset)
    Model.AddBuffers(builder, buffer_vector)
    builder.Finish(Model.End(builder), file_identifier=b"TFL3")
    path.write_bytes(builder.Output())
    return path


def _pool(cell: int) -> Callable[[flatbuffers.Builder], int]:
    """AVERAGE_POOL_2D's options: VALID, a cell x cell window and stride."""

    def build(builder: flatbuffers.Builder) -> int:
        Pool2DOptions.Start(builder)
        Pool2DOptions.AddPadding(builder, 1)  # VALID
        Pool2DOptions.AddStrideW(builder, cell)
        Pool2DOptions.AddStrideH(builder, cell)
        Pool2DOptions.AddFilterWidth(builder, cell)
        Pool2DOptions.AddFilterHeight(builder, cell)
        return Pool2DOptions.End(builder)

    return build


def _fully_connected(builder: flatbuffers.Builder) -> int:
    FullyConnectedOptions.Start(builder)
    return FullyConnectedOptions.End(builder)


POOLED_FEATURES = 4 * 4 * 3  # the image averaged to 4 x 4, flattened


def _pooled_image(input_name: str, size: int) -> tuple[list[TensorDef], list[OpDef]]:
    """Tensors 0-3 and their ops: the uint8 image, averaged to 4 x 4, flattened."""
    uint8, int32 = TensorType.TensorType.UINT8, TensorType.TensorType.INT32
    image_q = (1 / 128, 128)
    tensors = [
        TensorDef(input_name, [1, size, size, 3], uint8, quantization=image_q),
        TensorDef("pooled", [1, 4, 4, 3], uint8, quantization=image_q),
        TensorDef("flat_shape", [2], int32, np.array([1, POOLED_FEATURES], np.int32).tobytes()),
        TensorDef("flat", [1, POOLED_FEATURES], uint8, quantization=image_q),
    ]
    pool = (BuiltinOptions.BuiltinOptions.Pool2DOptions, _pool(size // 4))
    operators = [
        OpDef(BuiltinOperator.BuiltinOperator.AVERAGE_POOL_2D, [0], [1], pool),
        OpDef(BuiltinOperator.BuiltinOperator.RESHAPE, [1, 2], [3]),
    ]
    return tensors, operators


def _quantized_head(
    rng: np.random.Generator,
    names: tuple[str, str, str],
    outputs: int,
    weights: tuple[int, int],
    bias: tuple[int, int],
    output_q: tuple[float, int],
) -> list[TensorDef]:
    """A FULLY_CONNECTED's weights, bias and uint8 output on the flattened image."""
    uint8, int32 = TensorType.TensorType.UINT8, TensorType.TensorType.INT32
    return [
        TensorDef(
            names[0],
            [outputs, POOLED_FEATURES],
            uint8,
            rng.integers(*weights, (outputs, POOLED_FEATURES), dtype=np.uint8).tobytes(),
            (1 / 256, 128),
        ),
        TensorDef(
            names[1],
            [outputs],
            int32,
            rng.integers(*bias, outputs, dtype=np.int32).tobytes(),
            (1 / 128 / 256, 0),
        ),
        TensorDef(names[2], [1, outputs], uint8, quantization=output_q),
    ]


def _head_op(weights: int) -> OpDef:
    """The FULLY_CONNECTED of a head whose weights are tensor ``weights``."""
    return OpDef(
        BuiltinOperator.BuiltinOperator.FULLY_CONNECTED,
        [3, weights, weights + 1],
        [weights + 2],
        (BuiltinOptions.BuiltinOptions.FullyConnectedOptions, _fully_connected),
    )


def ssd_detector(
    path: Path, *, size: int = 32, anchors: int = 16, classes: int = 90, seed: int = 11
) -> Path:
    """An SSD detector with SSDLite MobileDet's interface: uint8 [1,size,size,3] in; an
    average pool, two quantized FULLY_CONNECTED heads (box encodings, class scores),
    DEQUANTIZE, RESHAPE, and the TFLite_Detection_PostProcess custom op that SSD models end
    with, which gives boxes, classes, scores and a count (float32)."""
    rng = np.random.default_rng(seed)
    int32, float32 = TensorType.TensorType.INT32, TensorType.TensorType.FLOAT32
    box_out, class_out = anchors * 4, anchors * (classes + 1)
    grid = (np.arange(4) + 0.5) / 4
    centres = np.array([(y, x) for y in grid for x in grid], dtype=np.float32)
    anchor_boxes = np.concatenate(
        [np.repeat(centres, anchors // 16 or 1, axis=0)[:anchors], np.full((anchors, 2), 0.3)],
        axis=1,
    ).astype(np.float32)  # y, x, h, w
    front, front_ops = _pooled_image("normalized_input_image_tensor", size)
    tensors = [
        *front,
        *_quantized_head(
            rng, ("box_weights", "box_bias", "box_q"), box_out, (96, 160), (-50, 50), (0.02, 128)
        ),
        *_quantized_head(
            rng,
            ("class_weights", "class_bias", "class_q"),
            class_out,
            (0, 256),
            (-4000, 4000),
            (1 / 255, 0),
        ),
        TensorDef("box_f", [1, box_out], float32),
        TensorDef("class_f", [1, class_out], float32),
        TensorDef("box_shape", [3], int32, np.array([1, anchors, 4], np.int32).tobytes()),
        TensorDef(
            "class_shape", [3], int32, np.array([1, anchors, classes + 1], np.int32).tobytes()
        ),
        TensorDef("raw_outputs/box_encodings", [1, anchors, 4], float32),
        TensorDef("raw_outputs/class_predictions", [1, anchors, classes + 1], float32),
        TensorDef("anchors", [anchors, 4], float32, anchor_boxes.tobytes()),
        TensorDef("TFLite_Detection_PostProcess", [1, 10, 4], float32),
        TensorDef("TFLite_Detection_PostProcess:1", [1, 10], float32),
        TensorDef("TFLite_Detection_PostProcess:2", [1, 10], float32),
        TensorDef("TFLite_Detection_PostProcess:3", [1], float32),
    ]

    ops_enum = BuiltinOperator.BuiltinOperator
    postprocess = flexbuffers.Dumps(
        {
            "max_detections": 10,
            "max_classes_per_detection": 1,
            "detections_per_class": 10,
            "use_regular_nms": False,
            "nms_score_threshold": 0.05,
            "nms_iou_threshold": 0.6,
            "num_classes": classes,
            "y_scale": 10.0,
            "x_scale": 10.0,
            "h_scale": 5.0,
            "w_scale": 5.0,
        }
    )
    operators = [
        *front_ops,
        _head_op(4),
        _head_op(7),
        OpDef(ops_enum.DEQUANTIZE, [6], [10]),
        OpDef(ops_enum.DEQUANTIZE, [9], [11]),
        OpDef(ops_enum.RESHAPE, [10, 12], [14]),
        OpDef(ops_enum.RESHAPE, [11, 13], [15]),
        OpDef(
            "TFLite_Detection_PostProcess",
            [14, 15, 16],
            [17, 18, 19, 20],
            custom_options=postprocess,
        ),
    ]
    return graph_model(path, tensors, operators, [0], [17, 18, 19, 20], "npuctl test SSD detector")


def pooled_classifier(path: Path, *, size: int = 224, classes: int = 1001, seed: int = 5) -> Path:
    """A classifier with MobileNet's full input size and a small file: an average pool to
    4 x 4, then one quantized FULLY_CONNECTED to the classes."""
    rng = np.random.default_rng(seed)
    front, front_ops = _pooled_image("input", size)
    head = _quantized_head(
        rng, ("weights", "bias", "scores"), classes, (0, 256), (-2000, 2000), (0.5, 128)
    )
    tensors, operators = [*front, *head], [*front_ops, _head_op(4)]
    return graph_model(path, tensors, operators, [0], [6], "npuctl test pooled classifier")


# -- convolution stacks: what Teflon hands to the NPU ---------------------------------------
Conv2DOptions = importlib.import_module("tflite.Conv2DOptions")
DepthwiseConv2DOptions = importlib.import_module("tflite.DepthwiseConv2DOptions")
AddOptions = importlib.import_module("tflite.AddOptions")
RELU6 = 3  # ActivationFunctionType
SAME = 0  # Padding


@dataclass(frozen=True)
class ConvLayer:
    """One convolution: ``depthwise`` keeps the channels (3x3, or ``kernel`` x ``kernel``
    when larger), otherwise ``kernel`` x ``kernel`` to ``channels``. A ``linear`` one has no
    activation and a zero point in the middle (MobileNetV2's projections); a ``residual``
    one is added to the input of its block, the ``block_layers`` layers ending with it (an
    inverted-residual block's three, a fused block's two)."""

    channels: int
    kernel: int = 1
    stride: int = 1
    depthwise: bool = False
    linear: bool = False
    residual: bool = False
    block_layers: int = 3

    @property
    def window(self) -> int:
        """The kernel's side."""
        return max(self.kernel, 3) if self.depthwise else self.kernel


@dataclass(frozen=True)
class TableAddition:
    """The quantization of an ADD that Mesa's rocket driver programs the NPU for. Mesa folds
    an ADD into the convolution that makes its first operand, and writes the element-wise
    stage's operand scale and the sum's output conversion from a table keyed by the other
    operand's scale (``rkt_regcmd.c``), taken from the published models it was tested with;
    at any other scale the registers get a factor unrelated to the model's. An entry holds
    the key, the operand's scale over the convolution's input scale times its weight scale,
    and the output conversion (offset, multiplier, shift); the sum's scale and zero point are
    the ones that conversion implies."""

    operand_scale: float
    operand_over_accumulator: float
    sum_offset: int
    sum_multiplier: int
    sum_shift: int

    @property
    def sum_scale(self) -> float:
        accumulator = self.operand_scale / self.operand_over_accumulator
        return accumulator * 2**self.sum_shift / self.sum_multiplier

    @property
    def sum_zero_point(self) -> int:
        return 128 + self.sum_offset


# Mesa's table (rkt_regcmd.c), by key. The entries come in runs of additions in a row, each
# sum the next one's operand (their implied sum scales are the next keys, within the 1e-5
# Mesa matches keys with): the residual blocks of a stage of a published model.
MESA_TABLE = {
    addition.operand_scale: addition
    for addition in (
        TableAddition(0.090192, 299.671889248, 6, 27676, 25),
        TableAddition(0.399250, 1326.499209406, 6, 27676, 25),
        TableAddition(0.364902, 780.34375, 4, 18589, 24),
        TableAddition(0.422037, 715.5625, 1, 22559, 24),
        TableAddition(0.213016, 564.6875, 4, 25914, 24),
        TableAddition(0.244231, 499.796875, 1, 28927, 24),
        TableAddition(0.283416, 488.203125, 6, 26050, 24),
        TableAddition(0.171151, 602.90625, -3, 28937, 24),
        TableAddition(0.164588, 271.921875, 1, 24877, 23),
        TableAddition(0.204098, 262.90625, 0, 23272, 23),
        TableAddition(0.116532, 450.140625, -8, 32292, 24),
        TableAddition(0.134499, 212.1953125, -5, 24153, 23),
        TableAddition(0.220141, 368.28125, 11, 27655, 24),
        TableAddition(0.094560, 416.421875, 5, 20432, 23),
        TableAddition(0.093230, 305.421875, -1, 25449, 23),
        TableAddition(0.100618, 313.671875, 0, 16874, 23),  # Mesa keeps the model's zero point
    )
}


@dataclass(frozen=True)
class ScaledAddition:
    """An ADD at scales a published model has, not the table's: the operand's (the block's
    input) and the sum's. The projection before it keeps its own weight scale."""

    operand_scale: float
    sum_scale: float

    @property
    def sum_zero_point(self) -> int:
        return 128


Addition = TableAddition | ScaledAddition


def _published_runs(*stages: tuple[float, ...]) -> tuple[ScaledAddition, ...]:
    """Additions of residual blocks stage by stage: within a stage each sum is the next
    block's input, so its scale is the next addition's operand scale; a stage's last sum
    takes its operand's."""
    return tuple(
        ScaledAddition(operand, stage[number + 1] if number + 1 < len(stage) else operand)
        for stage in stages
        for number, operand in enumerate(stage)
    )


# MobileNet V2 1.0 224 as published (Coral's mobilenet_v2_1.0_224_quant.tflite): its ten
# shortcut operands' scales, one, two, three, two and two per stage. None is a table key.
MOBILENET_V2_PUBLISHED_ADDITIONS = _published_runs(
    (0.2758,), (0.2184, 0.2597), (0.1854, 0.1891, 0.1997), (0.1706, 0.1762), (0.1324, 0.1507)
)
# MobileNetV2's ten additions (one, two, three, two and two per stage), from the table's runs.
MOBILENET_V2_ADDITIONS = tuple(
    MESA_TABLE[key]
    for key in (
        0.399250,
        0.094560, 0.093230,
        0.213016, 0.244231, 0.283416,
        0.171151, 0.164588,
        0.116532, 0.134499,
    )
)  # fmt: skip


def _conv_options(layer: ConvLayer, activation: int) -> tuple[int, Callable]:
    kind = DepthwiseConv2DOptions if layer.depthwise else Conv2DOptions

    def build(builder: flatbuffers.Builder) -> int:
        kind.Start(builder)
        kind.AddPadding(builder, SAME)
        kind.AddStrideW(builder, layer.stride)
        kind.AddStrideH(builder, layer.stride)
        if layer.depthwise:
            DepthwiseConv2DOptions.AddDepthMultiplier(builder, 1)
        kind.AddFusedActivationFunction(builder, activation)
        return kind.End(builder)

    options = BuiltinOptions.BuiltinOptions
    return (
        options.DepthwiseConv2DOptions if layer.depthwise else options.Conv2DOptions,
        build,
    )


def _weights(
    rng: np.random.Generator,
    shape: list[int],
    fan_in: int,
    input_scale: float,
    addition: Addition | None,
    signed: bool,
) -> tuple[np.ndarray, float]:
    """A layer's quantized weights and their scale. Inputs spread over [0, 6] and weights
    over +-64 steps: the sum's spread is about 3. Before a table's addition the table fixes
    input scale x weight scale, and the weights take fewer steps of the larger scale, so that
    the projection's own output (which TFLite quantizes before the ADD and Mesa does not)
    stays within its range."""
    weight_scale = 3 / (np.sqrt(fan_in) * 3.46 * 37)
    steps = 64
    if isinstance(addition, TableAddition):
        table_scale = addition.operand_scale / addition.operand_over_accumulator / input_scale
        steps = max(1, round(steps * weight_scale / table_scale))
        weight_scale = table_scale
    drawn = rng.integers(128 - steps, 129 + steps, shape)
    return (drawn - 128).astype(np.int8) if signed else drawn.astype(np.uint8), weight_scale


def _plan_additions(
    layers: list[ConvLayer], additions: tuple[Addition, ...]
) -> tuple[dict[int, Addition], dict[int, Addition]]:
    """The table additions by the residual layer they quantize, in turn, and by the layer
    whose output is that block's input (a projection, or the sum before)."""
    residuals = [number for number, layer in enumerate(layers) if layer.residual]
    planned = dict(zip(residuals[: len(additions)], additions, strict=True))
    return planned, {
        number - layers[number].block_layers: addition for number, addition in planned.items()
    }


@dataclass
class _Stack:
    """A model being built layer by layer: its tensors and ops so far, and the tensor the
    next layer reads (index, channels, size, quantization)."""

    tensors: list[TensorDef]
    operators: list[OpDef]
    rng: np.random.Generator
    kind: int
    offset: int  # int8 stores uint8's values minus 128
    activation: int
    current: int
    channels: int
    size: int
    current_q: tuple[float, int]


def _add_layers(
    stack: _Stack, layers: list[ConvLayer], additions: tuple[Addition, ...] = ()
) -> list[int]:
    """``layers`` after the stack's current tensor; each layer's output tensor, in turn."""
    tensors, operators, rng, kind, offset = (
        stack.tensors,
        stack.operators,
        stack.rng,
        stack.kind,
        stack.offset,
    )
    ops_enum = BuiltinOperator.BuiltinOperator
    signed = kind == TensorType.TensorType.INT8
    activation, activation_q = stack.activation, (6 / 255, offset)
    linear_q = (12 / 255, 128 + offset)  # [-6, 6]: a projection's output, and a sum's
    current, channels, size, current_q = stack.current, stack.channels, stack.size, stack.current_q
    layer_inputs: list[tuple[int, float]] = []
    planned, operand_of = _plan_additions(layers, additions)
    outputs = []
    for number, layer in enumerate(layers):
        scale = current_q[0]
        out_channels = channels if layer.depthwise else layer.channels
        kernel = layer.window
        fan_in = kernel * kernel * (1 if layer.depthwise else channels)
        shape = (
            [1, kernel, kernel, out_channels]
            if layer.depthwise
            else [out_channels, kernel, kernel, channels]
        )
        addition = planned.get(number)
        weights, weight_scale = _weights(rng, shape, fan_in, scale, addition, signed)
        # A bias of 2.0 keeps about two thirds of each layer's outputs above ReLU6's zero,
        # so that 27 layers on, the activations still vary (a projection's is centred).
        bias_value = 0.0 if layer.linear else 2.0
        bias = np.full(out_channels, round(bias_value / (scale * weight_scale)), np.int32)
        size = -(-size // layer.stride)
        output_q = linear_q if layer.linear else activation_q
        if number in operand_of and number not in planned:
            output_q = (operand_of[number].operand_scale, 128 + offset)
        elif addition is not None:  # [-20, 20]: room for the projection Mesa never rounds
            output_q = (40 / 255, 128 + offset)
        layer_inputs.append((current, scale))
        tensors += [
            TensorDef(
                f"weights_{number}", shape, kind, weights.tobytes(), (weight_scale, 128 + offset)
            ),
            TensorDef(
                f"bias_{number}",
                [out_channels],
                TensorType.TensorType.INT32,
                bias.tobytes(),
                (scale * weight_scale, 0),
            ),
            TensorDef(
                f"layer_{number}", [1, size, size, out_channels], kind, quantization=output_q
            ),
        ]
        code = ops_enum.DEPTHWISE_CONV_2D if layer.depthwise else ops_enum.CONV_2D
        operators.append(
            OpDef(
                code,
                [current, len(tensors) - 3, len(tensors) - 2],
                [len(tensors) - 1],
                _conv_options(layer, 0 if layer.linear else activation),
            )
        )
        current, channels, current_q = len(tensors) - 1, out_channels, output_q
        if layer.residual:
            block_input, block_scale = layer_inputs[number + 1 - layer.block_layers]
            sum_q = _sum_quantization(block_scale, addition, linear_q)
            sum_tensor = TensorDef(
                f"sum_{number}", [1, size, size, channels], kind, quantization=sum_q
            )
            current = _residual_add(tensors, operators, current, block_input, sum_tensor)
            current_q = sum_q
        outputs.append(current)
    stack.current, stack.channels, stack.size, stack.current_q = current, channels, size, current_q
    return outputs


def conv_stack(
    path: Path,
    layers: list[ConvLayer],
    *,
    size: int,
    channels: int = 3,
    signed: bool = False,
    activation: int = RELU6,
    seed: int = 3,
    classes: int = 0,
    additions: tuple[Addition, ...] = (),
    description: str = "npuctl test convolution stack",
) -> Path:
    """Quantized convolutions one after another, each with a fused activation, as a
    MobileNet's body is: uint8 (or int8 between QUANTIZE ops) with per-tensor scales chosen
    so that a layer's output spreads over the activation's range instead of saturating.
    ``additions`` quantize the residual ADDs in turn, and the tensors they add, as Mesa's
    table does (TableAddition)."""
    rng = np.random.default_rng(seed)
    ops_enum = BuiltinOperator.BuiltinOperator
    kind = TensorType.TensorType.INT8 if signed else TensorType.TensorType.UINT8
    offset = -128 if signed else 0  # int8 stores uint8's values minus 128
    activation_q = (6 / 255, offset)
    tensors = [
        TensorDef(
            "input",
            [1, size, size, channels],
            TensorType.TensorType.UINT8,
            quantization=(6 / 255, 0),
        )
    ]
    operators: list[OpDef] = []
    current = 0
    if signed:
        tensors.append(
            TensorDef("input_int8", [1, size, size, channels], kind, quantization=activation_q)
        )
        operators.append(OpDef(ops_enum.QUANTIZE, [0], [1]))
        current = 1
    stack = _Stack(
        tensors, operators, rng, kind, offset, activation, current, channels, size, activation_q
    )
    _add_layers(stack, layers, additions)
    current = stack.current
    if classes:  # MobileNet's head: average over the picture, 1x1 convolution, flatten
        # The average keeps the map's quantization, as TFLite's does.
        current = _classifier_head(
            tensors,
            operators,
            current,
            (stack.size, stack.channels, classes),
            kind,
            stack.current_q,
            rng,
        )
    if signed:
        tensors.append(
            TensorDef(
                "output",
                [1, stack.size, stack.size, stack.channels],
                TensorType.TensorType.UINT8,
                quantization=(6 / 255, 0),
            )
        )
        operators.append(OpDef(ops_enum.QUANTIZE, [current], [len(tensors) - 1]))
        current = len(tensors) - 1
    return graph_model(path, tensors, operators, [0], [current], description)


ConcatenationOptions = importlib.import_module("tflite.ConcatenationOptions")


@dataclass(frozen=True)
class SsdLayout:
    """An SSDLite detector's convolutions: the body, the layers whose outputs are its
    feature maps, the anchors of each map's cells, and the table additions its residual
    blocks take in turn (none: this project's own scales)."""

    body: list[ConvLayer]
    feature_maps: tuple[int, ...]
    anchors: tuple[int, ...]
    additions: tuple[Addition, ...] = ()


# SSDLite at 320x320: a MobileNet-style body, narrow (the emulated NPU's time goes with the
# multiplications), then feature maps at 20x20 and 10x10.
SSDLITE_SMALL = SsdLayout(
    body=[
        ConvLayer(16, kernel=3, stride=2),
        ConvLayer(0, depthwise=True, stride=2),
        ConvLayer(32),
        ConvLayer(0, depthwise=True, stride=2),
        ConvLayer(64),
        ConvLayer(0, depthwise=True, stride=2),
        ConvLayer(128),  # 20x20
        ConvLayer(0, depthwise=True, stride=2),
        ConvLayer(128),  # 10x10
    ],
    feature_maps=(6, 8),
    anchors=(2, 2),
)
SSD_CLASSES = 90  # COCO's, the background besides
DETECTED_CLASS = 3  # the class column every anchor 0 scores high in: COCO's car


def ssdlite_detector(
    path: Path, *, layout: SsdLayout = SSDLITE_SMALL, size: int = 320, seed: int = 17
) -> Path:
    """SSDLite as the published detectors are laid out: uint8 image in; a body of
    convolutions; at each feature map a box head and a class head (a depthwise 3x3, then a
    1x1 convolution to 4 box encodings, or to a score per class and the background, for
    each anchor of each cell); the cells' predictions reshaped and concatenated, the scores
    through LOGISTIC, both dequantized into TFLite_Detection_PostProcess (boxes, classes,
    scores, count). The convolutions are what the NPU computes, the rest runs on the CPU.

    The random weights would make every score about even, and the detections a lottery
    between two computations a step apart. So the class heads are dominated by their bias:
    one class at each cell's first anchor far above LOGISTIC's top, every other far below.
    The detections are then the same anchors on both sides, in the same order, and what
    the NPU's arithmetic decides is where each box lies (the box heads)."""
    rng = np.random.default_rng(seed)
    ops_enum = BuiltinOperator.BuiltinOperator
    uint8, int32, float32 = (
        TensorType.TensorType.UINT8,
        TensorType.TensorType.INT32,
        TensorType.TensorType.FLOAT32,
    )
    image_q = (1 / 128, 128)
    tensors = [
        TensorDef("normalized_input_image_tensor", [1, size, size, 3], uint8, quantization=image_q)
    ]
    operators: list[OpDef] = []
    stack = _Stack(tensors, operators, rng, uint8, 0, RELU6, 0, 3, size, image_q)
    outputs = _add_layers(stack, layout.body, layout.additions)
    box_q, class_q = (12 / 255, 128), (16 / 255, 128)  # class logits reach +-8: past LOGISTIC's top
    boxes, scores, anchor_boxes = [], [], []
    for layer, anchors in zip(layout.feature_maps, layout.anchors, strict=True):
        feature_map = tensors[outputs[layer]]
        _, cells, _, channels = feature_map.shape
        assert feature_map.quantization is not None
        count = cells * cells * anchors
        for head, width, quantization, bias in (
            ("box", 4, box_q, None),
            ("class", SSD_CLASSES + 1, class_q, _class_logits(anchors)),
        ):
            branch = _Stack(
                tensors,
                operators,
                rng,
                uint8,
                0,
                RELU6,
                outputs[layer],
                channels,
                cells,
                feature_map.quantization,
            )
            (made,) = _add_layers(branch, [ConvLayer(0, depthwise=True)])
            predicted = _prediction_conv(
                tensors,
                operators,
                rng,
                (made, channels, cells),
                anchors * width,
                quantization,
                bias,
            )
            tensors += [
                TensorDef(
                    f"{head}_shape_{layer}",
                    [3],
                    int32,
                    np.array([1, count, width], np.int32).tobytes(),
                ),
                TensorDef(f"{head}_{layer}", [1, count, width], uint8, quantization=quantization),
            ]
            operators.append(
                OpDef(ops_enum.RESHAPE, [predicted, len(tensors) - 2], [len(tensors) - 1])
            )
            (boxes if head == "box" else scores).append(len(tensors) - 1)
        centres = (np.arange(cells) + 0.5) / cells
        for y in centres:
            for x in centres:
                for anchor in range(anchors):
                    side = (1 + anchor) / cells  # a cell, then two
                    anchor_boxes.append((y, x, side, side))
    total = len(anchor_boxes)
    concatenated = {"box": (boxes, box_q, 4), "class": (scores, class_q, SSD_CLASSES + 1)}
    for head, (parts, quantization, width) in concatenated.items():
        tensors.append(
            TensorDef(f"{head}_all", [1, total, width], uint8, quantization=quantization)
        )
        operators.append(
            OpDef(
                ops_enum.CONCATENATION,
                parts,
                [len(tensors) - 1],
                (BuiltinOptions.BuiltinOptions.ConcatenationOptions, _concatenation_options),
            )
        )
    tensors.append(
        TensorDef("class_scores", [1, total, SSD_CLASSES + 1], uint8, quantization=(1 / 256, 0))
    )
    operators.append(OpDef(ops_enum.LOGISTIC, [len(tensors) - 2], [len(tensors) - 1]))
    box_all, class_scores = len(tensors) - 3, len(tensors) - 1
    tensors += [
        TensorDef("raw_outputs/box_encodings", [1, total, 4], float32),
        TensorDef("raw_outputs/class_predictions", [1, total, SSD_CLASSES + 1], float32),
        TensorDef("anchors", [total, 4], float32, np.array(anchor_boxes, np.float32).tobytes()),
        TensorDef("TFLite_Detection_PostProcess", [1, 10, 4], float32),
        TensorDef("TFLite_Detection_PostProcess:1", [1, 10], float32),
        TensorDef("TFLite_Detection_PostProcess:2", [1, 10], float32),
        TensorDef("TFLite_Detection_PostProcess:3", [1], float32),
    ]
    first = len(tensors) - 7
    postprocess = flexbuffers.Dumps(
        {
            "max_detections": 10,
            "max_classes_per_detection": 1,
            "detections_per_class": 10,
            "use_regular_nms": False,
            "nms_score_threshold": 0.5,
            "nms_iou_threshold": 0.6,
            "num_classes": SSD_CLASSES,
            "y_scale": 10.0,
            "x_scale": 10.0,
            "h_scale": 5.0,
            "w_scale": 5.0,
        }
    )
    operators += [
        OpDef(ops_enum.DEQUANTIZE, [box_all], [first]),
        OpDef(ops_enum.DEQUANTIZE, [class_scores], [first + 1]),
        OpDef(
            "TFLite_Detection_PostProcess",
            [first, first + 1, first + 2],
            list(range(first + 3, first + 7)),
            custom_options=postprocess,
        ),
    ]
    return graph_model(
        path, tensors, operators, [0], list(range(first + 3, first + 7)), "npuctl test SSDLite"
    )


def _class_logits(anchors: int) -> np.ndarray:
    """The class heads' biases as logits: DETECTED_CLASS at each cell's first anchor at +7
    (LOGISTIC's top step from about +5.2 on), everything else at -7."""
    logits = np.full((anchors, SSD_CLASSES + 1), -7.0)
    logits[0, DETECTED_CLASS] = 7.0
    return logits.reshape(-1)


def _prediction_conv(
    tensors: list[TensorDef],
    operators: list[OpDef],
    rng: np.random.Generator,
    source: tuple[int, int, int],
    out_channels: int,
    quantization: tuple[float, int],
    bias_logits: np.ndarray | None,
) -> int:
    """A linear 1x1 convolution of a head. Its weights take few steps: the box encodings
    stay within a fraction of an anchor, and a class head's logits within a step or so of
    its bias."""
    current, channels, cells = source
    input_scale = 6 / 255
    weight_scale = 3 / (np.sqrt(channels) * 3.46 * 37)
    steps = 4 if bias_logits is not None else 16
    weights = rng.integers(128 - steps, 129 + steps, (out_channels, 1, 1, channels))
    logits = np.zeros(out_channels) if bias_logits is None else bias_logits
    bias = np.round(logits / (input_scale * weight_scale)).astype(np.int32)
    number = len(tensors)
    tensors += [
        TensorDef(
            f"weights_{number}",
            [out_channels, 1, 1, channels],
            TensorType.TensorType.UINT8,
            weights.astype(np.uint8).tobytes(),
            (weight_scale, 128),
        ),
        TensorDef(
            f"bias_{number}",
            [out_channels],
            TensorType.TensorType.INT32,
            bias.tobytes(),
            (input_scale * weight_scale, 0),
        ),
        TensorDef(
            f"prediction_{number}",
            [1, cells, cells, out_channels],
            TensorType.TensorType.UINT8,
            quantization=quantization,
        ),
    ]
    operators.append(
        OpDef(
            BuiltinOperator.BuiltinOperator.CONV_2D,
            [current, number, number + 1],
            [number + 2],
            _conv_options(ConvLayer(out_channels), 0),
        )
    )
    return number + 2


def _concatenation_options(builder: flatbuffers.Builder) -> int:
    ConcatenationOptions.Start(builder)
    ConcatenationOptions.AddAxis(builder, 1)
    return ConcatenationOptions.End(builder)


def _classifier_head(
    tensors: list[TensorDef],
    operators: list[OpDef],
    current: int,
    sizes: tuple[int, int, int],
    kind: int,
    pooled_q: tuple[float, int],
    rng: np.random.Generator,
) -> int:
    """MobileNet's head after ``current`` (size x size x channels): average over the
    picture, a 1x1 convolution to ``classes``, flattened; the scores' tensor index."""
    size, channels, classes = sizes
    ops_enum = BuiltinOperator.BuiltinOperator
    uint8, int32 = TensorType.TensorType.UINT8, TensorType.TensorType.INT32
    tensors.append(TensorDef("pooled", [1, 1, 1, channels], kind, quantization=pooled_q))
    operators.append(
        OpDef(
            ops_enum.AVERAGE_POOL_2D,
            [current],
            [len(tensors) - 1],
            (BuiltinOptions.BuiltinOptions.Pool2DOptions, _pool(size)),
        )
    )
    current = len(tensors) - 1
    weight_scale = 3 / (np.sqrt(channels) * 3.46 * 37)
    tensors += [
        TensorDef(
            "logits_weights",
            [classes, 1, 1, channels],
            uint8,
            rng.integers(64, 193, (classes, 1, 1, channels)).astype(np.uint8).tobytes(),
            (weight_scale, 128),
        ),
        TensorDef(
            "logits_bias",
            [classes],
            int32,
            np.zeros(classes, np.int32).tobytes(),
            (pooled_q[0] * weight_scale, 0),
        ),
        TensorDef("logits", [1, 1, 1, classes], uint8, quantization=(0.1, 128)),
        TensorDef("logits_shape", [2], int32, np.array([1, classes], np.int32).tobytes()),
        TensorDef("scores", [1, classes], uint8, quantization=(0.1, 128)),
    ]
    operators += [
        OpDef(
            ops_enum.CONV_2D,
            [current, len(tensors) - 5, len(tensors) - 4],
            [len(tensors) - 3],
            _conv_options(ConvLayer(classes), 0),
        ),
        OpDef(ops_enum.RESHAPE, [len(tensors) - 3, len(tensors) - 2], [len(tensors) - 1]),
    ]
    return len(tensors) - 1


def _sum_quantization(
    block_scale: float, addition: Addition | None, linear_q: tuple[float, int]
) -> tuple[float, int]:
    """A residual sum's quantization: a projection's, or the addition's."""
    if addition is None:
        assert block_scale == linear_q[0], "a residual adds two projections' outputs"
        return linear_q
    assert abs(block_scale - addition.operand_scale) < 1e-5, "not the addition's operand"
    return addition.sum_scale, addition.sum_zero_point + linear_q[1] - 128


def _residual_add(
    tensors: list[TensorDef],
    operators: list[OpDef],
    projection: int,
    block_input: int,
    sum_tensor: TensorDef,
) -> int:
    """ADD of a block's projection (first, as slim's ``net += input``) and its input into
    ``sum_tensor``; the sum's tensor index."""
    tensors.append(sum_tensor)
    operators.append(
        OpDef(
            BuiltinOperator.BuiltinOperator.ADD,
            [projection, block_input],
            [len(tensors) - 1],
            (BuiltinOptions.BuiltinOptions.AddOptions, _add_options),
        )
    )
    return len(tensors) - 1


def _add_options(builder: flatbuffers.Builder) -> int:
    AddOptions.Start(builder)
    AddOptions.AddFusedActivationFunction(builder, 0)
    return AddOptions.End(builder)


def _mobilenet_v2_body() -> list[ConvLayer]:
    """MobileNetV2 1.0's body: a 3x3 convolution, 17 inverted-residual blocks (a 1x1
    expansion by 6, a depthwise 3x3, a linear 1x1 projection, added to the block's input
    where the shapes allow) and the 1x1 convolution to 1280 channels."""
    layers = [ConvLayer(32, kernel=3, stride=2), ConvLayer(0, depthwise=True)]
    layers.append(ConvLayer(16, linear=True))
    channels = 16
    for expansion, out, repeats, stride in (
        (6, 24, 2, 2),
        (6, 32, 3, 2),
        (6, 64, 4, 2),
        (6, 96, 3, 1),
        (6, 160, 3, 2),
        (6, 320, 1, 1),
    ):
        for repeat in range(repeats):
            step = stride if repeat == 0 else 1
            layers += [
                ConvLayer(channels * expansion),
                ConvLayer(0, stride=step, depthwise=True),
                ConvLayer(out, linear=True, residual=step == 1 and channels == out),
            ]
            channels = out
    return [*layers, ConvLayer(1280)]


MOBILENET_V2_BODY = _mobilenet_v2_body()


# MobileNetV1 1.0's body: a 3x3 convolution, then 13 depthwise-separable blocks (27 layers).
MOBILENET_V1_BODY = [
    ConvLayer(32, kernel=3, stride=2),
    *(
        layer
        for channels, stride in (
            (64, 1),
            (128, 2),
            (128, 1),
            (256, 2),
            (256, 1),
            (512, 2),
            (512, 1),
            (512, 1),
            (512, 1),
            (512, 1),
            (512, 1),
            (1024, 2),
            (1024, 1),
        )
        for layer in (ConvLayer(0, stride=stride, depthwise=True), ConvLayer(channels))
    ),
]


def _mobiledet_edgetpu_body() -> tuple[list[ConvLayer], tuple[int, ...]]:
    """SSDLite MobileDet's convolutions at 320x320 (the published
    ssdlite_mobiledet_coco_qat_postprocess, as TensorFlow's object detection API builds its
    MobileDet-EdgeTPU backbone and SSD's feature maps), and the layers whose outputs are
    the six feature maps. Every layer has ReLU6 but the projections that end a block:

    - a 3x3 convolution to 32, stride 2;
    - a Tucker block: 1x1 to 8, 3x3 to 16, 1x1 to 16;
    - fused blocks (a ``kernel`` convolution expanding the channels, then a 1x1 projection)
      and inverted bottlenecks (a 1x1 expansion, a depthwise ``kernel``, a 1x1
      projection), in stages of 16, 40, 72, 96, 120 and 384 channels; a block keeping the
      shape adds its input (three in each of the first five stages: fifteen additions);
    - C4 (20x20x96) and C5 (10x10x384) are the first two feature maps; four more, of 512,
      256, 256 and 128 channels at 5x5, 3x3, 2x2 and 1x1, each made by a 1x1 convolution to
      half the depth, a depthwise 3x3 of stride 2 and a 1x1 convolution."""
    layers = [
        ConvLayer(32, kernel=3, stride=2),
        ConvLayer(8),
        ConvLayer(16, kernel=3),
        ConvLayer(16, linear=True),
    ]
    channels = 16
    # (kind, channels out, expansion, kernel, stride)
    blocks = (
        ("fused", 16, 8, 3, 2), ("fused", 16, 4, 3, 1), ("fused", 16, 8, 3, 1),
        ("fused", 16, 4, 3, 1),
        ("fused", 40, 8, 5, 2), ("fused", 40, 4, 3, 1), ("fused", 40, 4, 3, 1),
        ("fused", 40, 4, 3, 1),
        ("ibn", 72, 8, 3, 2), ("ibn", 72, 8, 3, 1), ("fused", 72, 4, 3, 1),
        ("fused", 72, 4, 3, 1),
        ("ibn", 96, 8, 5, 1), ("ibn", 96, 8, 5, 1), ("ibn", 96, 8, 3, 1), ("ibn", 96, 8, 3, 1),
        ("ibn", 120, 8, 5, 2), ("ibn", 120, 8, 3, 1), ("ibn", 120, 4, 5, 1),
        ("ibn", 120, 8, 3, 1),
        ("ibn", 384, 8, 5, 1),
    )  # fmt: skip
    for kind, out, expansion, kernel, stride in blocks:
        residual = stride == 1 and out == channels
        expanded = channels * expansion
        if kind == "fused":
            layers.append(ConvLayer(expanded, kernel=kernel, stride=stride))
        else:
            layers += [
                ConvLayer(expanded),
                ConvLayer(0, kernel=kernel, stride=stride, depthwise=True),
            ]
        layers.append(
            ConvLayer(
                out,
                linear=True,
                residual=residual,
                block_layers=2 if kind == "fused" else 3,
            )
        )
        if out == 96:
            end_of_c4 = len(layers) - 1
        channels = out
    feature_maps = [end_of_c4, len(layers) - 1]
    for depth in (512, 256, 256, 128):
        layers += [
            ConvLayer(depth // 2),
            ConvLayer(0, stride=2, depthwise=True),
            ConvLayer(depth),
        ]
        feature_maps.append(len(layers) - 1)
    return layers, tuple(feature_maps)


_MOBILEDET_BODY, _MOBILEDET_FEATURE_MAPS = _mobiledet_edgetpu_body()
# Mesa's table is five runs of three additions, each sum the next one's operand, and one
# more entry: MobileDet's five stages of three residual blocks. They are taken in the
# table's order.
MOBILEDET_ADDITIONS = tuple(
    MESA_TABLE[key]
    for key in (
        0.090192, 0.364902, 0.422037,
        0.213016, 0.244231, 0.283416,
        0.171151, 0.164588, 0.204098,
        0.116532, 0.134499, 0.220141,
        0.094560, 0.093230, 0.100618,
    )
)  # fmt: skip
SSDLITE_MOBILEDET = SsdLayout(
    body=_MOBILEDET_BODY,
    feature_maps=_MOBILEDET_FEATURE_MAPS,
    anchors=(3, 6, 6, 6, 6, 6),  # SSD's anchor generator: three in the largest map's cells
    additions=MOBILEDET_ADDITIONS,
)
SSDLITE_MOBILEDET_OWN_SCALES = SsdLayout(
    body=_MOBILEDET_BODY, feature_maps=_MOBILEDET_FEATURE_MAPS, anchors=SSDLITE_MOBILEDET.anchors
)


def ssdlite_mobiledet(path: Path) -> Path:
    """SSDLite MobileDet at 320x320, its additions at the scales of Mesa's table."""
    return ssdlite_detector(path, layout=SSDLITE_MOBILEDET)


def ssdlite_mobiledet_own_scales(path: Path) -> Path:
    """SSDLite MobileDet at 320x320, its additions at this project's own scales."""
    return ssdlite_detector(path, layout=SSDLITE_MOBILEDET_OWN_SCALES)
