"""npuctl bench MODEL -n N: the model's platform times it in stages; this prints them."""

from __future__ import annotations

from pathlib import Path

import click
import numpy as np

from ..errors import ExitCode, NpuctlError
from ..families import by_name
from ..output import emit_json, table
from ..params import JSON_OUTPUT
from ..platform import BenchRun
from ..settings import Settings, pass_settings

KEYS = ("mean_ms", "p50_ms", "p95_ms", "min_ms", "max_ms", "stddev_ms", "throughput_per_s")


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
@JSON_OUTPUT
@pass_settings
def bench(
    settings: Settings, name: str, iterations: int, warmup: int, model: Path | None, as_json: bool
) -> None:
    """Time NAME in stages on its family's NPU: the stages its family times (the raw
    inference and the whole pipeline, or the NPU beside its CPU reference, and their ratio)."""
    entry = settings.manifest.model(name)
    if not (entry.platform or settings.platform):
        raise NpuctlError(
            f"the model manifest does not say which NPU family runs {name}: add "
            "'platform:' to it or pass --platform",
            ExitCode.USAGE,
        )
    platform = by_name(entry.platform or settings.platform or "")
    path, stages = platform.bench(
        BenchRun(settings, entry, model, iterations, warmup, shown=not as_json)
    )
    result: dict[str, object] = {
        "model": name,
        "platform": platform.name,
        "path": str(path),
        "iterations": iterations,
        "warmup": warmup,
        **{stage: statistics(seconds) for stage, seconds in stages.items()},
    }
    names = list(stages)
    if len(names) == 2:
        first, second = (result[stage]["mean_ms"] for stage in names)  # type: ignore[index]
        result["ratio"] = {"stages": names, "mean_ratio": second / first if first else 0.0}
    if as_json:
        emit_json(result)
        return
    click.echo(
        table(
            ["stage", "mean", "p50", "p95", "min", "max", "stddev", "per s"],
            [
                [stage.replace("_", " "), *[f"{result[stage][k]:.2f}" for k in KEYS]]  # type: ignore[index]
                for stage in names
            ],
        )
    )
    if "ratio" in result:
        ratio = result["ratio"]["mean_ratio"]  # type: ignore[index]
        click.echo(f"{names[1].replace('_', ' ')} / {names[0].replace('_', ' ')}: {ratio:.2f}x")
