"""The golden check's logic on models built at test time, run through ai-edge-litert on the
CPU: the reference passes against itself, and a perturbed "NPU" output is rejected."""

import numpy as np
import pytest

from npuctl.platforms.rocket.golden import (
    FLOAT_STEPS,
    TOLERANCE,
    compare,
    compare_detections,
    largest_difference,
)


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


def test_another_top5_is_rejected_and_named():
    cpu = np.array([90, 80, 70, 60, 50, 40, 10, 0], dtype=np.uint8)
    npu = cpu.copy()
    npu[4], npu[5] = 41, 50  # within the tolerance, yet class 5 is fifth now
    npu[5] = 52
    verdict = compare(npu, cpu, tolerance=20)
    assert not verdict.passed
    assert "top-5 differs: [0, 1, 2, 3, 5] on the NPU, [0, 1, 2, 3, 4] on the CPU" in (
        verdict.describe()
    )


def test_classes_tied_with_the_fifth_may_stand_in_for_each_other():
    cpu = np.array([90, 80, 70, 60, 50, 50, 10, 0], dtype=np.uint8)
    npu = cpu.copy()
    npu[4] = 49  # class 5 is fifth on the NPU; on the CPU it ties with class 4
    verdict = compare(npu, cpu)
    assert verdict.passed, verdict.describe()
    assert "top-5 the same" in verdict.describe()


def detections(*found: tuple[tuple[float, float, float, float], int, float]) -> list[np.ndarray]:
    """detect.found's shape: boxes (ymin, xmin, ymax, xmax), classes, scores, count."""
    boxes = np.array([box for box, _, _ in found], dtype=np.float32).reshape(-1)
    classes = np.array([label for _, label, _ in found], dtype=np.float32)
    scores = np.array([score for _, _, score in found], dtype=np.float32)
    return [boxes, classes, scores, np.array([len(found)], dtype=np.float32)]


CAR, BUS = ((0.1, 0.1, 0.5, 0.5), 2, 0.80), ((0.5, 0.5, 0.9, 0.9), 5, 0.79)


def test_the_same_detections_in_another_order_pass():
    npu = detections(((0.5, 0.5, 0.9, 0.9), 5, 0.795), CAR)
    verdict = compare_detections(npu, detections(CAR, BUS))
    assert not verdict.passed  # the best detection changed class
    nudged = detections(((0.1, 0.1, 0.5, 0.51), 2, 0.79), ((0.5, 0.5, 0.9, 0.9), 5, 0.785))
    verdict = compare_detections(nudged, detections(CAR, BUS))
    assert verdict.passed, verdict.describe()
    assert "every box matched (IoU at least 0.9" in verdict.describe()


def test_a_box_moved_or_another_class_or_score_is_rejected():
    moved = detections(CAR, ((0.55, 0.5, 0.95, 0.9), 5, 0.79))  # IoU 0.78
    relabelled = detections(CAR, ((0.5, 0.5, 0.9, 0.9), 7, 0.79))
    rescored = detections(CAR, ((0.5, 0.5, 0.9, 0.9), 5, 0.76))
    for npu, words in (
        (moved, "1 of the CPU's boxes unmatched"),
        (relabelled, "1 of the CPU's boxes unmatched"),
        (rescored, "largest score difference 0.030 (at most 0.02)"),
    ):
        verdict = compare_detections(npu, detections(CAR, BUS))
        assert not verdict.passed
        assert words in verdict.describe()


def test_no_detections_on_either_side_agree():
    assert compare_detections(detections(), detections()).passed


def test_mesas_measure_takes_every_output_element_by_element():
    """Mesa's own measure over a detector's outputs: uint8 in steps (no wrap-around), the
    post-processed floats in 1/33 steps, the largest of all; a class swapped in the ranking
    counts as far as the classes lie apart."""
    quantized = np.array([0, 255, 7], np.uint8)
    boxes = np.array([[0.10, 0.20, 0.30, 0.40]], np.float32)
    classes, scores = np.array([0.0, 66.0], np.float32), np.array([0.5, 0.25], np.float32)
    cpu = [quantized, boxes, classes, scores]
    assert largest_difference(cpu, [side.copy() for side in cpu]) == 0
    flipped = np.array([255, 0, 7], np.uint8)
    assert largest_difference([flipped, boxes, classes, scores], cpu) == 255
    moved = boxes + np.float32(2 / FLOAT_STEPS)
    moved_by_two = largest_difference([quantized, moved, classes, scores], cpu)
    assert moved_by_two == pytest.approx(2, abs=0.01)
    swapped = [quantized, boxes, classes[::-1].copy(), scores]
    assert largest_difference(swapped, cpu) == 66 * FLOAT_STEPS
    with pytest.raises(ValueError, match="3 outputs on the NPU, 4 on the CPU"):
        largest_difference(cpu[:3], cpu)
    with pytest.raises(ValueError, match="different shapes"):
        largest_difference([quantized[:2], boxes, classes, scores], cpu)
