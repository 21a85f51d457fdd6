"""npuctl run mobilenet | mobilenet-v2 IMAGE...: top-5 ImageNet classes; npuctl run ssdlite IMAGE:
objects with boxes. On the NPU through Teflon, or on the CPU interpreter (--cpu)."""

from __future__ import annotations

from pathlib import Path

import click

from npuctl.images import open_rgb
from npuctl.output import emit_json, table
from npuctl.params import JSON_OUTPUT
from npuctl.settings import Settings, pass_settings
from npuctl.vision import check_annotate_target, write_annotated

from . import detect
from .classify import image_tensor, read_labels, top
from .runtime import Classifier, delegate_of, managed_file

_CPU_OPTION = click.option(
    "--cpu", is_flag=True, help="Run on the CPU interpreter (the reference)."
)


def classifier(settings: Settings, name: str, model: Path | None, cpu: bool) -> Classifier:
    path = model or managed_file(settings, name)
    return Classifier(path, None if cpu else delegate_of(settings))


def classify_command(name: str) -> click.Command:
    @click.command(name=name)
    @click.argument("images", nargs=-1, required=True, type=click.Path(path_type=Path))
    @click.option(
        "--model",
        type=click.Path(path_type=Path),
        default=None,
        help=f"Any quantized image-classification .tflite instead of the managed {name}.",
    )
    @click.option(
        "--labels",
        type=click.Path(path_type=Path),
        default=None,
        help="One label per line [default: MobileNet's labels; class numbers for --model].",
    )
    @_CPU_OPTION
    @click.option("-k", "count", type=click.IntRange(1, 1000), default=5, show_default=True)
    @JSON_OUTPUT
    @pass_settings
    def classify(
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
        loaded = classifier(settings, name, model, cpu)
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

    return classify


mobilenet = classify_command("mobilenet")
mobilenet_v2 = classify_command("mobilenet-v2")


@click.command(name="ssdlite")
@click.argument("image", type=click.Path(path_type=Path))
@click.option(
    "--model",
    type=click.Path(path_type=Path),
    default=None,
    help="Any quantized SSD .tflite with its post-processing op instead of the managed one.",
)
@click.option(
    "--labels",
    type=click.Path(path_type=Path),
    default=None,
    help="One label per line, in class order [default: COCO's, by category id].",
)
@click.option("--conf", type=click.FloatRange(0, 1), default=0.25, show_default=True)
@click.option(
    "--annotate",
    type=click.Path(path_type=Path),
    default=None,
    help="Write a copy of the image with the boxes drawn.",
)
@_CPU_OPTION
@JSON_OUTPUT
@pass_settings
def ssdlite(
    settings: Settings,
    image: Path,
    model: Path | None,
    labels: Path | None,
    conf: float,
    annotate: Path | None,
    cpu: bool,
    as_json: bool,
) -> None:
    """Object detection with SSDLite MobileDet: a table of labels, scores and boxes."""
    if annotate is not None:
        check_annotate_target(annotate)
    picture = open_rgb(image, settings.max_image_pixels)
    names = detect.read_labels(labels)
    path = model or managed_file(settings, "ssdlite")
    loaded = detect.SsdModel(path, None if cpu else delegate_of(settings))
    outputs, seconds = loaded.run_all([detect.prepare(picture, loaded.input)])
    found = detect.detections(outputs, loaded.order, picture.size, names, conf)
    if annotate is not None:
        write_annotated(picture, found, annotate)
    if as_json:
        emit_json(
            {
                "model": str(loaded.path),
                "device": "cpu" if cpu else "npu",
                "image": str(image),
                "inference_ms": round(seconds * 1000, 3),
                "detections": [d.as_dict() for d in found],
                "annotated": str(annotate) if annotate else None,
            }
        )
        return
    click.echo(
        f"{image}: {len(found)} detections ({'CPU' if cpu else 'NPU'}, {seconds * 1000:.1f} ms)"
    )
    click.echo(
        table(
            ["label", "score", "x1", "y1", "x2", "y2"],
            [[d.label, f"{d.score:.2f}", *[f"{v:.0f}" for v in d.box]] for d in found],
        )
    )
