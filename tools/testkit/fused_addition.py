"""What Mesa's rocket driver makes of a residual ADD, computed on the host: it folds the ADD
into the convolution that makes its first operand (the DPU's element-wise stage), so the NPU
adds the other operand to that convolution's accumulator and converts the sum once. TFLite
first quantizes the convolution's output to its own tensor, rounding and clamping it, then
adds. For a model whose output is such a sum (a 1x1 projection and the block's input), the
answer of the fused arithmetic, from the CPU interpreter's own tensors."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from npuctl.platforms.rocket.litert import load_module


def fused_and_cpu(model: Path, tensor: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The model's output as the fused addition gives it, and as the CPU interpreter does."""
    litert = load_module()
    loaded = litert.Interpreter(
        model_path=str(model),
        experimental_preserve_all_tensors=True,
        experimental_op_resolver_type=litert.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
    )
    loaded.allocate_tensors()
    loaded.set_tensor(loaded.get_input_details()[0]["index"], tensor)
    loaded.invoke()
    details = {item["index"]: item for item in loaded.get_tensor_details()}
    operations = loaded._get_ops_details()
    add = operations[-1]
    output = loaded.get_output_details()[0]["index"]
    assert add["op_name"] == "ADD" and add["outputs"] == [output], f"{model.name}: no final ADD"
    projection_output, operand = add["inputs"]
    (conv,) = [op for op in operations if projection_output in op["outputs"]]
    source, weights, bias = conv["inputs"]
    assert details[weights]["shape"][1:3].tolist() == [1, 1], "the projection is not 1x1"

    def values(index: int) -> np.ndarray:
        return loaded.get_tensor(index).astype(np.float64)

    def scale(index: int) -> tuple[float, int]:
        quantization = details[index]["quantization"]
        return float(quantization[0]), int(quantization[1])

    (s_in, z_in), (s_w, z_w) = scale(source), scale(weights)
    kernels = values(weights)
    accumulator = (
        np.einsum(
            "nhwc,oc->nhwo",
            values(source) - z_in,
            kernels.reshape(kernels.shape[0], -1) - z_w,
        )
        * (s_in * s_w)
        + values(bias) * scale(bias)[0]
    )
    s_op, z_op = scale(operand)
    s_sum, z_sum = scale(add["outputs"][0])
    fused = np.rint((accumulator + (values(operand) - z_op) * s_op) / s_sum) + z_sum
    cpu = values(output)
    return np.clip(fused, 0, 255), cpu
