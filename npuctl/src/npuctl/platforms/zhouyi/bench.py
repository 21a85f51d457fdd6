"""npuctl bench on the Zhouyi NPU: raw inference (noe_job_infer_sync alone) and the full
pipeline (job, load, infer, read), random inputs."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from npuctl.output import progress_bar
from npuctl.platform import BenchRun

from .runtime import npu


def bench(run: BenchRun) -> tuple[Path, dict[str, list[float]]]:
    settings, entry, iterations, warmup, shown = (
        run.settings,
        run.entry,
        run.iterations,
        run.warmup,
        run.shown,
    )
    chosen = npu(settings).resolve(entry, run.model)
    pipeline: list[float] = []
    infer: list[float] = []
    with npu(settings).session() as session, npu(settings).model(session, chosen) as loaded:
        rng = np.random.default_rng(0)
        inputs = [rng.integers(0, 100, info.count).astype(info.dtype) for info in loaded.inputs]
        for _ in range(warmup):
            loaded.run(inputs)
        with progress_bar(iterations, entry.name, shown=shown) as bar:
            for _ in range(iterations):
                timing = loaded.run(inputs).timing
                pipeline.append(timing.pipeline)
                infer.append(timing.infer)
                bar.update(1)
    return chosen.path, {"raw_inference": infer, "full_pipeline": pipeline}
