"""npuctl bench on the RK3588: the same model and input on the NPU (Teflon) and on the CPU
interpreter, side by side."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from npuctl.output import progress_bar
from npuctl.platform import BenchRun

from .runtime import LiteModel, delegate_of, managed_file


def _time(loaded: LiteModel, iterations: int, warmup: int, label: str, shown: bool) -> list[float]:
    rng = np.random.default_rng(0)
    tensors = []
    for info in loaded.inputs:
        tensor = rng.integers(0, 256, info.shape).astype(np.int16)
        tensors.append((tensor - (128 if info.dtype == np.int8 else 0)).astype(info.dtype))
    for _ in range(warmup):
        loaded.run_all(tensors)
    seconds = []
    with progress_bar(iterations, label, shown=shown) as bar:
        for _ in range(iterations):
            seconds.append(loaded.run_all(tensors)[1])
            bar.update(1)
    return seconds


def bench(run: BenchRun) -> tuple[Path, dict[str, list[float]]]:
    name = run.entry.name
    path = run.model or managed_file(run.settings, name)
    npu = LiteModel(path, delegate_of(run.settings))
    cpu = LiteModel(path, None)
    return path, {
        "npu": _time(npu, run.iterations, run.warmup, f"{name} on the NPU", run.shown),
        "cpu": _time(cpu, run.iterations, run.warmup, f"{name} on the CPU", run.shown),
    }
