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
