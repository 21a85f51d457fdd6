"""Immich's machine-learning API (POST /predict, GET /ping): its form's `entries` checked into
one CLIP request, and the answers in the shapes Immich's server reads. No I/O here.

Immich's server sends `entries` as JSON such as {"clip": {"visual": {"modelName": ...}}} with
a file field `image`, or {"clip": {"textual": {...}}} with a text field `text`, and reads
back {"clip": "<the vector as a JSON array, in a string>"} (plus imageHeight and imageWidth
for an image). Errors come as FastAPI's {"detail": ...}: any status other than 2xx makes
Immich try its next machine-learning URL."""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from . import api

try:  # Immich's own server writes its vectors with orjson: the same digits
    import orjson
except ImportError:  # pragma: no cover - depends on the installation
    orjson = None  # type: ignore[assignment]

CLIP, VISUAL, TEXTUAL = "clip", "visual", "textual"
# Immich's tasks, as its server names them; this server computes CLIP only.
KNOWN_TASKS = (CLIP, "facial-recognition", "ocr")
ROOT = {"message": "Immich ML"}


@dataclass(frozen=True)
class Asked:
    model_name: str
    image: bytes | None
    text: str | None


def error_body(error: api.ApiError) -> bytes:
    return json.dumps({"detail": str(error)}).encode()


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


def _refused(status: int, message: str) -> api.ApiError:
    return api.ApiError(status, message, "invalid_request")
