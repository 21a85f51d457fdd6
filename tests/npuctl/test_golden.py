"""The golden check's logic on models built at test time, run through ai-edge-litert on the
CPU: the reference passes against itself, and a perturbed "NPU" output is rejected."""

import numpy as np
import pytest

from npuctl.platforms.rocket.golden import TOLERANCE, compare


@pytest.fixture
def outputs(tflite_classifier):
    from npuctl.platforms.rocket.litert import interpreter

    loaded = interpreter(tflite_classifier("golden.tflite", size=16, classes=50), None)
    (tensor,) = loaded.get_input_details()
    rng = np.random.default_rng(11)
    results = []
    for _ in range(2):
        loaded.set_tensor(tensor["index"], rng.integers(0, 256, tensor["shape"], dtype=np.uint8))
        loaded.invoke()
        (output,) = loaded.get_output_details()
        results.append(loaded.get_tensor(output["index"]).reshape(-1).copy())
    return results


def test_the_reference_agrees_with_itself(outputs):
    verdict = compare(outputs[0], outputs[0].copy())
    assert verdict.passed
    assert verdict.max_difference == 0
    assert "top-1" in verdict.describe() and "on both" in verdict.describe()


def test_a_difference_within_the_tolerance_passes(outputs):
    cpu = outputs[0]
    npu = cpu.astype(np.int16)
    runner_up = int(np.argsort(cpu)[0])  # the lowest score: moving it cannot change top-1
    npu[runner_up] += TOLERANCE if cpu[runner_up] < 250 else -TOLERANCE
    assert compare(npu.astype(cpu.dtype), cpu).passed


def test_a_perturbed_npu_output_is_rejected(outputs):
    cpu = outputs[0]
    npu = cpu.astype(np.int16)
    lowest = int(np.argmin(cpu))
    npu[lowest] += TOLERANCE + 1
    verdict = compare(npu.astype(cpu.dtype), cpu)
    assert not verdict.passed
    assert f"largest element difference {TOLERANCE + 1}" in verdict.describe()


def test_another_top1_is_rejected_and_named(outputs):
    cpu = outputs[0]
    npu = cpu.copy()
    best, other = int(np.argmax(cpu)), int(np.argmin(cpu))
    npu[best], npu[other] = cpu[other], cpu[best]
    verdict = compare(npu, cpu)
    assert not verdict.passed
    assert f"class {other} on the NPU, {best} on the CPU" in verdict.describe()


def test_the_output_of_another_input_is_rejected(outputs):
    assert not compare(outputs[1], outputs[0]).passed
