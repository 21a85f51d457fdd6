"""Immich's machine-learning API (GET /ping, GET /, POST /predict), as Immich's server calls it
(server/src/repositories/machine-learning.repository.ts in immich-app/immich): a form with
`entries` (JSON such as {"clip": {"visual": {"modelName": ...}}}) and the photo in the file
field `image`, or {"clip": {"textual": {...}}} and the text in `text`; the answer
{"clip": "<the vector as a JSON array, in a string>"} (plus imageHeight and imageWidth for a
photo). Errors are FastAPI's {"detail": ...}: any status other than 2xx makes Immich try its
next machine-learning URL and mark this one unhealthy until a /ping succeeds, so /ping
answers at once and a /predict that comes while the models load waits for them, as Immich's
own server does."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
from aiohttp import web

from ...embedder import Embedder, Prepared, Rejected
from ...embeddings import normalise
from ..errors import ApiError
from ..protocol import FORM, PREPARE_INLINE, UPLOAD, Call, HttpApi, Route, json_response
from ..service import Service, server_timing

try:  # Immich's own server writes its vectors with orjson: the same digits
    import orjson
except ImportError:  # pragma: no cover - depends on the installation
    orjson = None  # type: ignore[assignment]

CLIP, VISUAL, TEXTUAL = "clip", "visual", "textual"
ROOT = {"message": "Immich ML"}


@dataclass(frozen=True)
class Asked:
    model_name: str
    image: bytes | None
    text: str | None


# -- handlers ------------------------------------------------------------------------------
async def ping(call: Call) -> web.Response:
    return web.Response(text="pong")


async def root(call: Call) -> web.Response:
    return json_response(json.dumps(ROOT).encode())


async def predict(call: Call) -> web.Response:
    fields = await call.form()
    service = call.service
    embedder = service.embedder
    asked = parse(fields, embedder.immich_names if embedder else ())
    assert embedder is not None  # parse() refuses every model when nothing embeds
    if asked.image is not None:
        return await _photo(call, embedder, asked.image)
    text = asked.text or ""
    if len(text) > PREPARE_INLINE:
        prepared = await call.blocking(_text, service, embedder, text)
    else:  # a search query: tokenized here, cheaper than a thread's hand-over
        prepared = _text(service, embedder, text)
    outputs, _ = await service.infer(embedder.keys["text"], [prepared.tensor])
    return json_response(_answer(service, embedder, prepared, outputs, None))


async def _photo(call: Call, embedder: Embedder, image: bytes) -> web.Response:
    """A photo decoded and prepared as Immich prepares it (on a request thread), embedded;
    Server-Timing as for vision."""
    service = call.service
    started = time.perf_counter()
    prepared, size, decode_seconds, cpu = await call.blocking(
        _photo_tensor, service, embedder, image
    )
    prepared_at = time.perf_counter()
    outputs, work = await service.infer(embedder.keys["image"], [prepared.tensor])
    finished, cpu_finished = time.perf_counter(), time.thread_time()
    body = _answer(service, embedder, prepared, outputs, size)
    answered = time.perf_counter()
    return json_response(
        body,
        headers=server_timing(
            decode=decode_seconds,
            preprocess=prepared_at - started - decode_seconds,
            queue=work.queued_seconds,
            npu=work.npu_seconds,
            postprocess=answered - finished,
            total=answered - started,
            cpu=cpu + time.thread_time() - cpu_finished,
        ),
    )


def _photo_tensor(
    service: Service, embedder: Embedder, image: bytes
) -> tuple[Prepared, tuple[int, int], float, float]:
    """The photo's tensor, its size, the decode's wall time and the thread's CPU time apart
    from the decode."""
    started, cpu_started = time.perf_counter(), time.thread_time()
    picture = service.decode(image, "the image")
    decode_seconds, decode_cpu = time.perf_counter() - started, time.thread_time() - cpu_started
    size = picture.size
    try:
        prepared = embedder.prepare_photo(picture)
    except Rejected as error:  # no image model
        raise ApiError(422, str(error), error.code) from None
    del picture
    service.done_with(size)
    metrics = service.metrics
    metrics.stage("decode", decode_seconds)
    metrics.stage("preprocess", time.perf_counter() - started - decode_seconds)
    return prepared, size, decode_seconds, time.thread_time() - cpu_started - decode_cpu


def _text(service: Service, embedder: Embedder, text: str) -> Prepared:
    """A text cleaned and cut to the window, as Immich's tokenizer does."""
    started = time.perf_counter()
    try:
        prepared = embedder.prepare_text(cleaned(text), True)
    except Rejected as error:
        raise ApiError(400, str(error), error.code) from None
    service.metrics.stage("preprocess", time.perf_counter() - started)
    return prepared


def _answer(
    service: Service,
    embedder: Embedder,
    prepared: Prepared,
    outputs: list[np.ndarray],
    size: tuple[int, int] | None,
) -> bytes:
    service.metrics.input(prepared.modality)
    service.metrics.model_answered(embedder.keys[prepared.modality], "ok")
    return answer(normalise(embedder.vector(prepared.modality, outputs)), size)


# -- requests ------------------------------------------------------------------------------
def parse(fields: dict[str, bytes], served: tuple[str, ...]) -> Asked:
    """The one CLIP entry of a /predict form, or ApiError (4xx) saying what this server
    computes, so that whoever reads Immich's log knows what to change."""
    kind, model_name = _clip_entry(fields, served)
    image, text = fields.get("image"), fields.get("text")
    if image is not None and text is not None:
        raise _refused(400, "send either image or text, not both")
    if kind == VISUAL:
        if image is None:
            raise _refused(400, "a clip visual entry needs the photo in the field 'image'")
        return Asked(model_name, image, None)
    if text is None:
        raise _refused(400, "a clip textual entry needs the field 'text'")
    try:
        decoded = text.decode("utf-8")
    except UnicodeDecodeError:
        raise _refused(400, "the text is not UTF-8") from None
    return Asked(model_name, None, decoded)


def _clip_entry(fields: dict[str, bytes], served: tuple[str, ...]) -> tuple[str, str]:
    """The kind (visual or textual) and the model of the form's one CLIP entry."""
    if "entries" not in fields:
        raise _refused(422, "the form has no field 'entries' (Immich sends its request there)")
    try:
        entries = json.loads(fields["entries"])
    except (ValueError, RecursionError):
        raise _refused(422, "Invalid request format: 'entries' is not JSON") from None
    if not isinstance(entries, dict) or not entries:
        raise _refused(422, "Invalid request format: 'entries' must name a task")
    tasks = [task for task in entries if task != CLIP]
    if tasks:
        task = str(tasks[0])[:60]
        raise _refused(422, f"the task {task!r} is not computed here: {_offer(served)}")
    types = entries[CLIP]
    if not isinstance(types, dict) or len(types) != 1:
        raise _refused(422, "Invalid request format: 'clip' takes one of 'visual' or 'textual'")
    ((kind, entry),) = types.items()
    if kind not in (VISUAL, TEXTUAL):
        raise _refused(422, f"clip {kind[:60]!r} is not computed here: {_offer(served)}")
    model_name = entry.get("modelName") if isinstance(entry, dict) else None
    if not isinstance(model_name, str):
        raise _refused(422, "Invalid request format: the entry has no 'modelName'")
    if model_name not in served:
        raise _refused(422, f"this server does not compute {model_name[:100]!r}: {_offer(served)}")
    return kind, model_name


def cleaned(text: str) -> str:
    """As Immich cleans a text before tokenizing it (immich_ml/models/transforms.py)."""
    return " ".join(text.split())


def _offer(served: tuple[str, ...]) -> str:
    if not served:
        return (
            "this server's NPU runs no CLIP model, so it has no Immich task: give Immich its own "
            "machine-learning server"
        )
    names = " or ".join(served)
    return (
        f"it computes clip (visual and textual) with {names} only; choose {names} as the smart "
        "search model in Immich (Administration > Machine Learning), and give Immich a second "
        "machine-learning URL (its own server) for facial recognition and OCR"
    )


def _refused(status: int, message: str) -> ApiError:
    return ApiError(status, message, "invalid_request")


# -- answers -------------------------------------------------------------------------------
def answer(vector: np.ndarray, size: tuple[int, int] | None) -> bytes:
    """Immich's answer: the vector as the text of a JSON array, in a string."""
    values = vector.astype(np.float32, copy=False)
    if orjson is not None:
        encoded = orjson.dumps(values, option=orjson.OPT_SERIALIZE_NUMPY).decode()
    else:  # shortest float32 digits, as orjson writes them
        encoded = "[" + ",".join(str(value) for value in values) + "]"
    document: dict[str, object] = {CLIP: encoded}
    if size is not None:
        document["imageHeight"], document["imageWidth"] = size[1], size[0]
    return json.dumps(document, separators=(",", ":")).encode()


def error_body(error: ApiError) -> bytes:
    return json.dumps({"detail": str(error)}).encode()


# -- the protocol --------------------------------------------------------------------------
def schemas(service: Service) -> dict[str, Any]:
    return {
        "ImmichForm": {
            "type": "object",
            "required": ["entries"],
            "properties": {
                "entries": {
                    "type": "string",
                    "description": 'JSON: {"clip": {"visual": {"modelName": NAME}}} with an '
                    'image, or {"clip": {"textual": {"modelName": NAME}}} with a text.',
                },
                "image": {"type": "string", "format": "binary"},
                "text": {"type": "string"},
            },
        },
        "ImmichClip": {
            "type": "object",
            "required": ["clip"],
            "properties": {
                "clip": {"type": "string", "description": "The embedding: a JSON array, as text."},
                "imageHeight": {"type": "integer"},
                "imageWidth": {"type": "integer"},
            },
        },
        "ImmichRoot": {
            "type": "object",
            "required": ["message"],
            "properties": {"message": {"type": "string"}},
        },
        "ImmichError": {
            "type": "object",
            "required": ["detail"],
            "properties": {"detail": {"type": "string"}},
        },
    }


# Immich's server cannot send a key, so --public immich opens these.
API = HttpApi(
    "immich",
    (
        Route(
            "GET",
            "/ping",
            ping,
            "Immich's availability check: pong (at once, also while the models load).",
            public="immich",
            responses={"200": ("pong (text/plain).", None)},
        ),
        Route(
            "GET",
            "/",
            root,
            "Immich's machine-learning root.",
            public="immich",
            responses={"200": ("Its name.", "ImmichRoot")},
        ),
        Route(
            "POST",
            "/predict",
            predict,
            "A CLIP embedding of a photo or a text for Immich's smart search (while the models "
            "load, it waits for them).",
            public="immich",
            body=UPLOAD,
            request={FORM: "ImmichForm"},
            inference=True,
            timed=True,
            responses={
                "200": ("The embedding, and a photo's decoded size.", "ImmichClip"),
                "400": ("No image or text, both, or a broken image.", "ImmichError"),
                "415": ("Not a JPEG, PNG, WebP or BMP image.", "ImmichError"),
                "422": (
                    "Entries not understood, a task or model not computed here.",
                    "ImmichError",
                ),
            },
        ),
    ),
    error_body,
    "ImmichError",
    schemas,
    ("/predict", "/ping"),
)
