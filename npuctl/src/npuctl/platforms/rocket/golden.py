"""The golden check: the same input through the NPU and through the CPU interpreter must
agree. A classifier: top-1 and top-5 the same and no output element further apart than
Mesa's own test allows. A detector: the same detections, each box over the CPU's by an IoU
of at least 0.9, of the same class and with a score within 0.02."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

TOLERANCE = 2  # Mesa's Teflon tests allow a per-element difference of 2 (quantized units)
TOP = 5
# Mesa's tests allow a float output (an SSD's post-processed boxes, classes, scores) a
# difference of its tolerance / 33 where a quantized output has its tolerance in steps.
FLOAT_STEPS = 33


@dataclass(frozen=True)
class Verdict:
    top1_npu: int
    top1_cpu: int
    max_difference: int
    tolerance: int
    top5_npu: tuple[int, ...] = ()
    top5_cpu: tuple[int, ...] = ()
    top5_same: bool = True

    @property
    def passed(self) -> bool:
        return (
            self.top1_npu == self.top1_cpu
            and self.top5_same
            and self.max_difference <= self.tolerance
        )

    def describe(self) -> str:
        top1 = (
            f"top-1 {self.top1_npu} on both"
            if self.top1_npu == self.top1_cpu
            else f"top-1 differs: class {self.top1_npu} on the NPU, {self.top1_cpu} on the CPU"
        )
        top5 = (
            f"top-{TOP} the same"
            if self.top5_same
            else f"top-{TOP} differs: {list(self.top5_npu)} on the NPU, "
            f"{list(self.top5_cpu)} on the CPU"
        )
        return (
            f"{top1}, {top5}, largest element difference {self.max_difference} "
            f"(at most {self.tolerance})"
        )


def compare(npu: np.ndarray, cpu: np.ndarray, tolerance: int = TOLERANCE) -> Verdict:
    if npu.shape != cpu.shape:
        raise ValueError(f"outputs of different shapes: {npu.shape} and {cpu.shape}")
    difference = np.abs(npu.astype(np.int64) - cpu.astype(np.int64))
    top = min(TOP, cpu.size)
    npu_top, cpu_top = (
        np.argsort(-side.astype(np.int64), kind="stable")[:top] for side in (npu, cpu)
    )
    return Verdict(
        int(np.argmax(npu)),
        int(np.argmax(cpu)),
        int(difference.max(initial=0)),
        tolerance,
        tuple(npu_top.tolist()),
        tuple(cpu_top.tolist()),
        _same_top(npu, cpu, top),
    )


def _same_top(npu: np.ndarray, cpu: np.ndarray, top: int) -> bool:
    """Whether some ``top`` classes are the best ``top`` on both sides. Quantized scores tie
    often: classes tied with a side's last place may stand in for each other there."""
    if top == 0:
        return True
    sure: set[int] = set()  # above the last place on either side: in any best set
    allowed: set[int] | None = None  # at or above the last place on both sides
    for side in (npu, cpu):
        last = np.sort(side.astype(np.int64))[-top]
        sure |= set(np.flatnonzero(side > last).tolist())
        within = set(np.flatnonzero(side >= last).tolist())
        allowed = within if allowed is None else allowed & within
    assert allowed is not None
    return sure <= allowed and len(sure) <= top <= len(allowed)


SCORE_TOLERANCE = 0.02  # a confidence as a client thresholds it, to two decimals
IOU_AT_LEAST = 0.9  # the same box, give or take a quantization step of its corners


@dataclass(frozen=True)
class DetectionVerdict:
    """An SSD detector's post-processed answers (float boxes, classes, scores, count). Each
    CPU detection is paired with the NPU's of the same class whose box overlaps it most, so
    two detections of close scores may come in either order."""

    count_npu: int
    count_cpu: int
    best_npu: int  # the best detection's class, -1 when there is none
    best_cpu: int
    max_score_difference: float
    tolerance: float = SCORE_TOLERANCE
    unmatched: int = 0  # CPU detections no NPU detection of their class overlaps enough
    smallest_iou: float = 1.0  # of the pairs

    @property
    def passed(self) -> bool:
        return (
            self.count_npu == self.count_cpu
            and self.best_npu == self.best_cpu
            and self.unmatched == 0
            and self.max_score_difference <= self.tolerance
        )

    def describe(self) -> str:
        counts = (
            f"{self.count_cpu} detections on both"
            if self.count_npu == self.count_cpu
            else f"{self.count_npu} detections on the NPU, {self.count_cpu} on the CPU"
        )
        best = (
            f"best class {self.best_cpu} on both"
            if self.best_npu == self.best_cpu
            else f"best class {self.best_npu} on the NPU, {self.best_cpu} on the CPU"
        )
        boxes = (
            f"every box matched (IoU at least {self.smallest_iou:.2f})"
            if self.unmatched == 0
            else f"{self.unmatched} of the CPU's boxes unmatched (class and IoU >= {IOU_AT_LEAST})"
        )
        return (
            f"{counts}, {best}, {boxes}, largest score difference "
            f"{self.max_score_difference:.3f} (at most {self.tolerance})"
        )


def compare_detections(npu: list[np.ndarray], cpu: list[np.ndarray]) -> DetectionVerdict:
    """``npu`` and ``cpu``: boxes, classes, scores and count as detect.found gives them."""
    (npu_boxes, npu_classes, npu_scores, _), (cpu_boxes, cpu_classes, cpu_scores, _) = (
        npu[-4:],
        cpu[-4:],
    )
    pairs = _pairs(npu_boxes.reshape(-1, 4), npu_classes, cpu_boxes.reshape(-1, 4), cpu_classes)
    differences = [abs(float(npu_scores[j]) - float(cpu_scores[i])) for i, j, _ in pairs]
    return DetectionVerdict(
        int(npu_scores.size),
        int(cpu_scores.size),
        int(npu_classes[0]) if npu_classes.size else -1,
        int(cpu_classes[0]) if cpu_classes.size else -1,
        max(differences, default=0.0),
        unmatched=int(cpu_scores.size) - len(pairs),
        smallest_iou=min((overlap for _, _, overlap in pairs), default=1.0),
    )


def _pairs(
    npu_boxes: np.ndarray, npu_classes: np.ndarray, cpu_boxes: np.ndarray, cpu_classes: np.ndarray
) -> list[tuple[int, int, float]]:
    """(CPU index, NPU index, IoU): each CPU detection, best first, with the unpaired NPU
    detection of its class that overlaps it most, when that IoU is at least IOU_AT_LEAST."""
    taken: set[int] = set()
    pairs = []
    for i in range(cpu_boxes.shape[0]):
        choices = [
            (iou(cpu_boxes[i], npu_boxes[j]), j)
            for j in range(npu_boxes.shape[0])
            if j not in taken and int(npu_classes[j]) == int(cpu_classes[i])
        ]
        best, j = max(choices, default=(0.0, -1))
        if best >= IOU_AT_LEAST:
            taken.add(j)
            pairs.append((i, j, best))
    return pairs


def iou(first: Sequence[float], second: Sequence[float]) -> float:
    """Of two boxes given as ymin, xmin, ymax, xmax (the post-processing op's order)."""
    height = min(first[2], second[2]) - max(first[0], second[0])
    width = min(first[3], second[3]) - max(first[1], second[1])
    inter = max(float(height), 0.0) * max(float(width), 0.0)
    area = float((first[2] - first[0]) * (first[3] - first[1]))
    area += float((second[2] - second[0]) * (second[3] - second[1]))
    union = area - inter
    if union <= 0:  # two empty boxes at one place are the same box
        return 1.0 if list(first) == list(second) else 0.0
    return inter / union


def largest_difference(npu: Sequence[np.ndarray], cpu: Sequence[np.ndarray]) -> float:
    """Mesa's own measure of a model's outputs, element by element over every output in
    order: a quantized output's difference in steps, a float output's in 1/FLOAT_STEPS (so
    that one tolerance serves both), rounded up to a hundredth."""
    if len(npu) != len(cpu):
        raise ValueError(f"{len(npu)} outputs on the NPU, {len(cpu)} on the CPU")
    largest = 0.0
    for npu_output, cpu_output in zip(npu, cpu, strict=True):
        if npu_output.shape != cpu_output.shape:
            raise ValueError(f"outputs of different shapes: {npu_output.shape}, {cpu_output.shape}")
        if np.issubdtype(cpu_output.dtype, np.floating):
            difference = np.abs(npu_output.astype(np.float64) - cpu_output) * FLOAT_STEPS
        else:
            difference = np.abs(npu_output.astype(np.int64) - cpu_output.astype(np.int64))
        largest = max(largest, float(difference.max(initial=0)))
    return math.ceil(largest * 100 - 1e-9) / 100
