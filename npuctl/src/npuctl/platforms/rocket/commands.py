"""npuctl run mobilenet IMAGE...: top-5 ImageNet classes on the NPU (or --cpu)."""

from __future__ import annotations

from pathlib import Path

import click

from npuctl.cli import Settings, pass_settings
from npuctl.errors import ModelError
from npuctl.images import open_rgb
from npuctl.models.store import Lock, verify
from npuctl.output import emit_json, table

from .classify import image_tensor, read_labels, top
from .runtime import Classifier, delegate_of

MODEL = "mobilenet"


def managed_file(settings: Settings, name: str) -> Path:
    entry = settings.manifest.get(name)
    check = verify(entry, settings.models_dir, Lock.load(settings.models_dir))
    if check.state in ("missing", "invalid", "mismatch"):
        raise ModelError(f"{name}: {check.detail}")
    return check.path


def classifier(settings: Settings, model: Path | None, cpu: bool) -> Classifier:
    path = model or managed_file(settings, MODEL)
    return Classifier(path, None if cpu else delegate_of(settings))


@click.command()
@click.argument("images", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--model",
    type=click.Path(path_type=Path),
    default=None,
    help="Any quantized image-classification .tflite instead of the managed MobileNet.",
)
@click.option(
    "--labels",
    type=click.Path(path_type=Path),
    default=None,
    help="One label per line [default: MobileNet's labels; class numbers for --model].",
)
@click.option("--cpu", is_flag=True, help="Run on the CPU interpreter (the reference).")
@click.option("-k", "count", type=click.IntRange(1, 1000), default=5, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@pass_settings
def mobilenet(
    settings: Settings,
    images: tuple[Path, ...],
    model: Path | None,
    labels: Path | None,
    cpu: bool,
    count: int,
    as_json: bool,
) -> None:
    """The top classes of each image (rocket NPU through Mesa Teflon, or --cpu)."""
    pictures = [open_rgb(image, settings.max_image_pixels) for image in images]
    loaded = classifier(settings, model, cpu)
    if labels is None and model is None:
        labels = managed_file(settings, "mobilenet-labels")
    names = read_labels(labels, loaded.classes)
    results = []
    for image, picture in zip(images, pictures, strict=True):
        timed = loaded.run(image_tensor(picture, loaded.input))
        results.append((image, top(timed.raw, loaded.output, names, count), timed.seconds))
    if as_json:
        emit_json(
            {
                "model": str(loaded.path),
                "device": "cpu" if cpu else "npu",
                "images": [
                    {
                        "image": str(image),
                        "inference_ms": round(seconds * 1000, 3),
                        "top": [
                            {"index": p.index, "label": p.label, "score": round(p.score, 6)}
                            for p in predictions
                        ],
                    }
                    for image, predictions, seconds in results
                ],
            }
        )
        return
    for image, predictions, seconds in results:
        click.echo(f"{image} ({'CPU' if cpu else 'NPU'}, {seconds * 1000:.1f} ms)")
        click.echo(
            table(
                ["class", "label", "score"],
                [[str(p.index), p.label, f"{p.score:.3f}"] for p in predictions],
            )
        )
