"""npuctl bench MODEL -n N"""

from __future__ import annotations

from pathlib import Path

import click
import numpy as np

from ..cli import Settings, pass_settings
from ..output import emit_json, progress_bar, table


def statistics(seconds: list[float]) -> dict[str, float]:
    values = np.array(seconds) * 1000.0
    mean = float(values.mean())
    return {
        "mean_ms": mean,
        "p50_ms": float(np.percentile(values, 50)),
        "p95_ms": float(np.percentile(values, 95)),
        "min_ms": float(values.min()),
        "max_ms": float(values.max()),
        "stddev_ms": float(values.std()),
        "throughput_per_s": 1000.0 / mean if mean else 0.0,
    }


@click.command()
@click.argument("name")
@click.option("-n", "iterations", type=click.IntRange(1), default=100, show_default=True)
@click.option("--warmup", type=click.IntRange(0), default=3, show_default=True)
@click.option(
    "--model",
    type=click.Path(path_type=Path),
    default=None,
    help="Use this model file instead of the managed one.",
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@pass_settings
def bench(
    settings: Settings, name: str, iterations: int, warmup: int, model: Path | None, as_json: bool
) -> None:
    """Time NAME's raw inference and its full pipeline (job, load, infer, read, clean)."""
    chosen = settings.npu.resolve(settings.manifest.model(name), model)
    pipeline: list[float] = []
    infer: list[float] = []
    with (
        settings.npu.session() as session,
        settings.npu.model(session, chosen) as loaded,
    ):
        rng = np.random.default_rng(0)
        inputs = [rng.integers(0, 100, info.count).astype(info.dtype) for info in loaded.inputs]
        for _ in range(warmup):
            loaded.run(inputs)
        with progress_bar(iterations, name, shown=not as_json) as bar:
            for _ in range(iterations):
                timing = loaded.run(inputs).timing
                pipeline.append(timing.pipeline)
                infer.append(timing.infer)
                bar.update(1)
    result = {
        "model": name,
        "path": str(chosen.path),
        "iterations": iterations,
        "warmup": warmup,
        "raw_inference": statistics(infer),
        "full_pipeline": statistics(pipeline),
    }
    if as_json:
        emit_json(result)
        return
    keys = ["mean_ms", "p50_ms", "p95_ms", "min_ms", "max_ms", "stddev_ms", "throughput_per_s"]
    click.echo(
        table(
            ["stage", "mean", "p50", "p95", "min", "max", "stddev", "per s"],
            [
                [stage, *[f"{result[key][k]:.2f}" for k in keys]]
                for stage, key in (
                    ("raw inference", "raw_inference"),
                    ("full pipeline", "full_pipeline"),
                )
            ],
        )
    )
