"""npuctl run clip-text | clip-image | yolo"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import click
import numpy as np
from PIL import Image, ImageDraw

from ..cli import Settings, pass_settings
from ..errors import InputError
from ..inference import Model
from ..noe.binding import TensorInfo, quantize
from ..output import emit_json, matrix, table
from ..pipelines import clip_image, yolo
from ..pipelines.clip_tokenizer import CONTEXT_LENGTH, ClipTokenizer
from ..pipelines.embeddings import normalise, similarity
from ..pipelines.images import open_rgb

_model_option = click.option(
    "--model",
    type=click.Path(path_type=Path),
    default=None,
    help="Use this model file instead of the managed one.",
)
_json_option = click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")


@click.group()
def run() -> None:
    """Run a model on the NPU."""


def load_tokenizer(settings: Settings, vocab: Path | None) -> ClipTokenizer:
    if vocab is None:
        entry = settings.manifest.get("clip-bpe-vocab")
        vocab = settings.npu.models_dir / entry.file
        if not vocab.exists():
            raise InputError(
                f"the CLIP vocabulary {vocab} is missing: run 'npuctl models "
                "fetch clip-text' or pass --vocab"
            )
    return ClipTokenizer(vocab)


def tokens_for(tokenizer: ClipTokenizer, text: str, truncate: bool) -> np.ndarray:
    if not text.strip():
        raise InputError("a text is empty: give at least one word")
    needed = len(tokenizer.encode(text)) + 2
    if needed > CONTEXT_LENGTH and not truncate:
        raise InputError(
            f"a text needs {needed} tokens, CLIP reads {CONTEXT_LENGTH} "
            f"({len(text)} characters): shorten it or pass --truncate"
        )
    return tokenizer.tokenize(text)


def embed_texts(
    model: Model, tokenizer: ClipTokenizer, texts: tuple[str, ...], truncate: bool
) -> list[np.ndarray]:
    token_dtype = model.inputs[0].dtype
    return [
        normalise(model.run([tokens_for(tokenizer, text, truncate).astype(token_dtype)]).values())
        for text in texts
    ]


def embed_images(model: Model, paths: tuple[Path, ...]) -> list[np.ndarray]:
    return [
        normalise(model.run([clip_input(open_rgb(path), model.inputs[0])]).values())
        for path in paths
    ]


def clip_input(image: Image.Image, info: TensorInfo) -> np.ndarray:
    """The visual encoder's input tensor, quantized with the descriptor's scale."""
    if info.dtype.kind in "iu":
        return clip_image.quantized(image, info.scale, info.zero_point, info.dtype)
    return quantize(clip_image.preprocess(image), info)


@run.command(name="clip-text")
@click.argument("texts", nargs=-1, required=True)
@_model_option
@click.option(
    "--vocab",
    type=click.Path(path_type=Path),
    default=None,
    help="CLIP's bpe_simple_vocab_16e6.txt.gz [default: in the model directory].",
)
@click.option("--truncate", is_flag=True, help="Cut texts longer than 77 tokens.")
@_json_option
@pass_settings
def clip_text(
    settings: Settings,
    texts: tuple[str, ...],
    model: Path | None,
    vocab: Path | None,
    truncate: bool,
    as_json: bool,
) -> None:
    """512-d text embeddings, and their similarity matrix for several texts."""
    tokenizer = load_tokenizer(settings, vocab)
    for text in texts:
        tokens_for(tokenizer, text, truncate)  # bad input fails before the NPU is touched
    entry = settings.manifest.get("clip-text")
    path, trusted = settings.npu.resolve(entry, model)
    with (
        settings.npu.session() as session,
        settings.npu.model(session, path, trusted=trusted, entry=entry) as loaded,
    ):
        embeddings = embed_texts(loaded, tokenizer, texts, truncate)
    scores = similarity(embeddings, embeddings)
    if as_json:
        emit_json(
            {
                "model": str(path),
                "embeddings": [
                    {"text": text, "dimensions": len(vector), "embedding": vector.round(6).tolist()}
                    for text, vector in zip(texts, embeddings, strict=True)
                ],
                "similarity": scores.round(6).tolist(),
            }
        )
        return
    click.echo(
        table(
            ["text", "dims", "first values"],
            [
                [text, len(v), " ".join(f"{x:+.3f}" for x in v[:4])]
                for text, v in zip(texts, embeddings, strict=True)
            ],
        )
    )
    if len(texts) > 1:
        click.echo("\ncosine similarity\n" + matrix(texts, texts, scores))


@run.command(name="clip-image")
@click.argument("images", nargs=-1, required=True, type=click.Path(path_type=Path))
@_model_option
@click.option("--text", "texts", multiple=True, help="Also compare with this text (repeat).")
@click.option(
    "--text-model",
    type=click.Path(path_type=Path),
    default=None,
    help="CLIP text model file for --text.",
)
@click.option("--vocab", type=click.Path(path_type=Path), default=None)
@_json_option
@pass_settings
def clip_image_command(
    settings: Settings,
    images: tuple[Path, ...],
    model: Path | None,
    texts: tuple[str, ...],
    text_model: Path | None,
    vocab: Path | None,
    as_json: bool,
) -> None:
    """512-d image embeddings; image-image and text-image similarity (one shared space)."""
    for image in images:
        open_rgb(image)  # a file that is not an image fails before the NPU is touched
    tokenizer = load_tokenizer(settings, vocab) if texts else None
    visual = settings.manifest.get("clip-visual")
    path, trusted = settings.npu.resolve(visual, model)
    with settings.npu.session() as session:
        with settings.npu.model(session, path, trusted=trusted, entry=visual) as loaded:
            image_vectors = embed_images(loaded, images)
        text_vectors: list[np.ndarray] = []
        if texts and tokenizer is not None:
            text_entry = settings.manifest.get("clip-text")
            text_path, text_trusted = settings.npu.resolve(text_entry, text_model)
            with settings.npu.model(
                session, text_path, trusted=text_trusted, entry=text_entry
            ) as loaded_text:
                text_vectors = embed_texts(loaded_text, tokenizer, texts, False)
    names = [str(image) for image in images]
    image_scores = similarity(image_vectors, image_vectors)
    text_scores = similarity(text_vectors, image_vectors) if text_vectors else None
    if as_json:
        emit_json(
            {
                "model": str(path),
                "embeddings": [
                    {"image": n, "dimensions": len(v), "embedding": v.round(6).tolist()}
                    for n, v in zip(names, image_vectors, strict=True)
                ],
                "similarity": image_scores.round(6).tolist(),
                "text_similarity": None
                if text_scores is None
                else {"texts": list(texts), "scores": text_scores.round(6).tolist()},
            }
        )
        return
    click.echo(matrix(names, names, image_scores))
    if text_scores is not None:
        click.echo("\ntext-image similarity\n" + matrix(texts, names, text_scores))


@run.command(name="yolo")
@click.argument("image", type=click.Path(path_type=Path))
@_model_option
@click.option("--conf", type=click.FloatRange(0, 1), default=0.25, show_default=True)
@click.option("--iou", type=click.FloatRange(0, 1), default=0.45, show_default=True)
@click.option(
    "--annotate",
    type=click.Path(path_type=Path),
    default=None,
    help="Write a copy of the image with the boxes drawn.",
)
@_json_option
@pass_settings
def yolo_command(
    settings: Settings,
    image: Path,
    model: Path | None,
    conf: float,
    iou: float,
    annotate: Path | None,
    as_json: bool,
) -> None:
    """Object detection: a table of labels, scores and boxes."""
    picture = open_rgb(image)
    entry = settings.manifest.get("yolov8n")
    path, trusted = settings.npu.resolve(entry, model)
    tensor, box = yolo.letterbox(picture)
    with (
        settings.npu.session() as session,
        settings.npu.model(session, path, trusted=trusted, entry=entry) as loaded,
    ):
        outputs = loaded.run([quantize(tensor, loaded.inputs[0])])
    detections = yolo.decode(outputs.values(), box, conf=conf, iou=iou)
    if annotate is not None:
        write_annotated(picture, detections, annotate)
    if as_json:
        emit_json(
            {
                "model": str(path),
                "image": str(image),
                "detections": [d.as_dict() for d in detections],
                "annotated": str(annotate) if annotate else None,
            }
        )
        return
    click.echo(f"{image}: {len(detections)} detections")
    click.echo(
        table(
            ["label", "score", "x1", "y1", "x2", "y2"],
            [[d.label, f"{d.score:.2f}", *[f"{v:.0f}" for v in d.box]] for d in detections],
        )
    )


def write_annotated(picture: Image.Image, detections: list[yolo.Detection], target: Path) -> None:
    drawn = picture.copy()
    draw = ImageDraw.Draw(drawn)
    for detection in detections:
        draw.rectangle(detection.box, outline=(255, 64, 0), width=3)
        draw.text(
            (detection.box[0] + 3, detection.box[1] + 2),
            f"{detection.label} {detection.score:.2f}",
            fill=(255, 64, 0),
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(
        prefix=".annotated-", suffix=target.suffix, dir=target.parent
    )
    os.close(handle)
    try:
        drawn.save(temporary)
        Path(temporary).replace(target)
    except (OSError, ValueError) as error:
        Path(temporary).unlink(missing_ok=True)
        raise InputError(f"cannot write {target}: {error}") from error
