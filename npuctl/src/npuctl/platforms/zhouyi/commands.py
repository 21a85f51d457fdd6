"""npuctl run clip-text | clip-image | yolo"""

from __future__ import annotations

from pathlib import Path

import click
import numpy as np
from PIL import Image

from npuctl.embeddings import normalise, similarity
from npuctl.errors import InputError
from npuctl.images import open_rgb
from npuctl.output import emit_json, matrix, table
from npuctl.params import JSON_OUTPUT, UTF8_TEXT
from npuctl.settings import Settings, pass_settings
from npuctl.vision import check_annotate_target, write_annotated

from .noe.binding import quantize
from .pipelines import yolo
from .pipelines.clip_tokenizer import CONTEXT_LENGTH, ClipTokenizer, padded
from .pipelines.text_fixes import CLEANING
from .preparation import clip_input, load_tokenizer
from .runtime import Model, npu

_model_option = click.option(
    "--model",
    type=click.Path(path_type=Path),
    default=None,
    help="Use this model file instead of the managed one.",
)


def tokens_for(tokenizer: ClipTokenizer, text: str, truncate: bool) -> np.ndarray:
    """The model input for ``text``; bad input fails here, before the NPU is touched, in time
    bounded by the 77-token window (a 1 MB text costs milliseconds)."""
    if not text.strip():
        raise InputError("a text is empty: give at least one word")
    ids, more = tokenizer.window(text, CONTEXT_LENGTH - 2)
    if more and not truncate:
        raise InputError(
            f"a text needs more than the {CONTEXT_LENGTH} tokens CLIP reads "
            f"({len(text)} characters): shorten it or pass --truncate"
        )
    return padded(ids)


def embed_tokens(model: Model, tokens: list[np.ndarray]) -> list[np.ndarray]:
    token_dtype = model.inputs[0].dtype
    return [normalise(model.run([ids.astype(token_dtype)]).values()) for ids in tokens]


def embed_images(model: Model, pictures: list[Image.Image]) -> list[np.ndarray]:
    return [
        normalise(model.run([clip_input(picture, model.inputs[0])]).values())
        for picture in pictures
    ]


@click.command(name="clip-text")
@click.argument("texts", nargs=-1, required=True, type=UTF8_TEXT)
@_model_option
@click.option(
    "--vocab",
    type=click.Path(path_type=Path),
    default=None,
    help="CLIP's bpe_simple_vocab_16e6.txt.gz [default: in the model directory].",
)
@click.option("--truncate", is_flag=True, help="Cut texts longer than 77 tokens.")
@JSON_OUTPUT
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
    tokens = [tokens_for(tokenizer, text, truncate) for text in texts]
    chosen = npu(settings).resolve(settings.manifest.model("clip-text"), model)
    with npu(settings).session() as session, npu(settings).model(session, chosen) as loaded:
        embeddings = embed_tokens(loaded, tokens)
    scores = similarity(embeddings, embeddings)
    if as_json:
        emit_json(
            {
                "model": str(chosen.path),
                "text_cleaning": CLEANING,
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


@click.command(name="clip-image")
@click.argument("images", nargs=-1, required=True, type=click.Path(path_type=Path))
@_model_option
@click.option(
    "--text", "texts", multiple=True, type=UTF8_TEXT, help="Also compare with this text (repeat)."
)
@click.option(
    "--text-model",
    type=click.Path(path_type=Path),
    default=None,
    help="CLIP text model file for --text.",
)
@click.option("--vocab", type=click.Path(path_type=Path), default=None)
@JSON_OUTPUT
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
    # Bad input fails before the NPU is touched.
    pictures = [open_rgb(image, settings.max_image_pixels) for image in images]
    tokenizer = load_tokenizer(settings, vocab) if texts else None
    tokens = [tokens_for(tokenizer, text, False) for text in texts] if tokenizer else []
    chosen = npu(settings).resolve(settings.manifest.model("clip-visual"), model)
    text_chosen = (
        npu(settings).resolve(settings.manifest.model("clip-text"), text_model) if texts else None
    )
    with npu(settings).session() as session:
        with npu(settings).model(session, chosen) as loaded:
            image_vectors = embed_images(loaded, pictures)
        text_vectors: list[np.ndarray] = []
        if text_chosen is not None:
            with npu(settings).model(session, text_chosen) as loaded_text:
                text_vectors = embed_tokens(loaded_text, tokens)
    names = [str(image) for image in images]
    image_scores = similarity(image_vectors, image_vectors)
    text_scores = similarity(text_vectors, image_vectors) if text_vectors else None
    if as_json:
        emit_json(
            {
                "model": str(chosen.path),
                "embeddings": [
                    {"image": n, "dimensions": len(v), "embedding": v.round(6).tolist()}
                    for n, v in zip(names, image_vectors, strict=True)
                ],
                "similarity": image_scores.round(6).tolist(),
                "text_similarity": None
                if text_scores is None
                else {
                    "texts": list(texts),
                    "scores": text_scores.round(6).tolist(),
                    "text_cleaning": CLEANING,
                },
            }
        )
        return
    click.echo(matrix(names, names, image_scores))
    if text_scores is not None:
        click.echo("\ntext-image similarity\n" + matrix(texts, names, text_scores))


@click.command(name="yolo")
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
@JSON_OUTPUT
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
    if annotate is not None:
        check_annotate_target(annotate)
    picture = open_rgb(image, settings.max_image_pixels)
    chosen = npu(settings).resolve(settings.manifest.model("yolov8n"), model)
    tensor, box = yolo.letterbox(picture)
    with npu(settings).session() as session, npu(settings).model(session, chosen) as loaded:
        outputs = loaded.run([quantize(tensor, loaded.inputs[0])])
    detections = yolo.decode(outputs.values(), box, conf=conf, iou=iou)
    if annotate is not None:
        write_annotated(picture, detections, annotate)
    if as_json:
        emit_json(
            {
                "model": str(chosen.path),
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
