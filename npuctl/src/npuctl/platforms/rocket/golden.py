"""The golden check: the same input through the NPU and through the CPU interpreter must
agree, top-1 equal and no output element further apart than Mesa's own test allows."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

TOLERANCE = 2  # Mesa's Teflon tests allow a per-element difference of 2 (quantized units)


@dataclass(frozen=True)
class Verdict:
    top1_npu: int
    top1_cpu: int
    max_difference: int
    tolerance: int

    @property
    def passed(self) -> bool:
        return self.top1_npu == self.top1_cpu and self.max_difference <= self.tolerance

    def describe(self) -> str:
        top1 = (
            f"top-1 {self.top1_npu} on both"
            if self.top1_npu == self.top1_cpu
            else f"top-1 differs: class {self.top1_npu} on the NPU, {self.top1_cpu} on the CPU"
        )
        return (
            f"{top1}, largest element difference {self.max_difference} (at most {self.tolerance})"
        )


def compare(npu: np.ndarray, cpu: np.ndarray, tolerance: int = TOLERANCE) -> Verdict:
    if npu.shape != cpu.shape:
        raise ValueError(f"outputs of different shapes: {npu.shape} and {cpu.shape}")
    difference = np.abs(npu.astype(np.int64) - cpu.astype(np.int64))
    return Verdict(
        int(np.argmax(npu)), int(np.argmax(cpu)), int(difference.max(initial=0)), tolerance
    )


SCORE_TOLERANCE = 0.05  # two quantized logits through the post-processing op's sigmoid


@dataclass(frozen=True)
class DetectionVerdict:
    """An SSD detector's post-processed answers (float boxes, classes, scores, count)."""

    count_npu: int
    count_cpu: int
    best_npu: int  # the best detection's class, -1 when there is none
    best_cpu: int
    max_score_difference: float
    tolerance: float = SCORE_TOLERANCE

    @property
    def passed(self) -> bool:
        return (
            self.count_npu == self.count_cpu
            and self.best_npu == self.best_cpu
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
        return (
            f"{counts}, {best}, largest score difference {self.max_score_difference:.3f} "
            f"(at most {self.tolerance})"
        )


def compare_detections(npu: list[np.ndarray], cpu: list[np.ndarray]) -> DetectionVerdict:
    """``npu`` and ``cpu``: classes, scores and count as detect.found gives them."""
    (npu_classes, npu_scores, _), (cpu_classes, cpu_scores, _) = npu[-3:], cpu[-3:]
    shared = min(npu_scores.size, cpu_scores.size)
    difference = np.abs(npu_scores[:shared] - cpu_scores[:shared])
    return DetectionVerdict(
        int(npu_scores.size),
        int(cpu_scores.size),
        int(npu_classes[0]) if npu_classes.size else -1,
        int(cpu_classes[0]) if cpu_classes.size else -1,
        float(difference.max(initial=0.0)),
    )
