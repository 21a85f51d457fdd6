"""The vision API of DeepStack and CodeProject.AI, which Frigate's deepstack detector and Home
Assistant's DeepStack integrations call: a form with the image in the field 'image', optional
'min_confidence', 'top_k' and 'api_key'; answers {"success": ..., "predictions": [...],
"duration": ...} with boxes in the sent image's pixels, best first, at most as many as
Frigate reads; errors as {"success": false, "error", "code"}."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from aiohttp import web

from .. import pipeline
from ..errors import ApiError
from ..models import CLASSIFICATION, DETECTION, ServedModel
from ..protocol import FORM, UPLOAD, URLENCODED, Call, HttpApi, Route, json_response
from ..service import Service, server_timing

if TYPE_CHECKING:
    from ...vision import Detection

DEFAULT_MIN_CONFIDENCE = 0.4  # DeepStack's and CodeProject.AI's default
DEFAULT_TOP_K = 5
MAX_TOP_K = 1000


@dataclass(frozen=True)
class Asked:
    image: bytes
    min_confidence: float
    api_key: bytes | None
    top_k: int


def parse(fields: Mapping[str, bytes]) -> Asked:
    """The request from the form's fields (the first of each name)."""
    image = fields.get("image")
    if not image:
        raise _invalid("the form has no image: send it as the file field 'image'")
    return Asked(
        image,
        _number(fields, "min_confidence", DEFAULT_MIN_CONFIDENCE, 0.0, 1.0),
        fields.get("api_key") or None,
        int(_number(fields, "top_k", DEFAULT_TOP_K, 1, MAX_TOP_K)),
    )


def _number(
    fields: Mapping[str, bytes], name: str, default: float, low: float, high: float
) -> float:
    raw = fields.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        value = float(raw.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        raise _invalid(f"{name} must be a number from {low:g} to {high:g}") from None
    if not (math.isfinite(value) and low <= value <= high):
        raise _invalid(f"{name} must be a number from {low:g} to {high:g}")
    return value


def _invalid(message: str) -> ApiError:
    return ApiError(400, message, "invalid_request")


# -- handlers ------------------------------------------------------------------------------
async def detection(call: Call) -> web.Response:
    def reply(model: ServedModel, outputs: list[np.ndarray], asked: Asked, seen: Seen) -> bytes:
        limit = call.service.limits.max_detections
        found = pipeline.detections(
            call.service, model, outputs, seen.prepared.context, asked.min_confidence, limit
        )
        return detection_reply(found, seen.prepared.size, limit, seen.npu_finished - seen.started)

    return await _picture(call, DETECTION, reply)


async def classification(call: Call) -> web.Response:
    def reply(model: ServedModel, outputs: list[np.ndarray], asked: Asked, seen: Seen) -> bytes:
        classes = pipeline.classes(model, outputs, asked.top_k)
        return classification_reply(classes, seen.npu_finished - seen.started)

    return await _picture(call, CLASSIFICATION, reply)


@dataclass(frozen=True)
class Seen:
    """A picture's way so far: prepared, and when the request started and the NPU finished."""

    prepared: pipeline.Prepared
    started: float
    npu_finished: float


Reply = Callable[[ServedModel, list[np.ndarray], Asked, Seen], bytes]


async def _picture(call: Call, task: str, reply: Reply) -> web.Response:
    """The form read, its key checked, the picture through the model of ``task``, the
    answer ``reply`` makes, with Server-Timing saying where the request's time went."""
    fields = await call.form()
    call.authorize(fields.get("api_key"))
    asked = parse(fields)
    service = call.service
    model = service.of_task(task)
    started = time.perf_counter()
    prepared = await call.blocking(pipeline.picture, service, model, asked.image)
    outputs, work = await service.infer(model.key, prepared.tensors)
    finished, cpu_finished = time.perf_counter(), time.thread_time()
    body = reply(model, outputs, asked, Seen(prepared, started, finished))
    answered = time.perf_counter()
    service.answered(model, work, answered - finished)
    return json_response(
        body,
        headers=server_timing(
            decode=prepared.decode_seconds,
            preprocess=prepared.prepare_seconds,
            queue=work.queued_seconds,
            npu=work.npu_seconds,
            postprocess=answered - finished,
            total=answered - started,
            # the request's own work, decode aside: what a busy machine cannot inflate
            cpu=prepared.cpu + time.thread_time() - cpu_finished,
        ),
    )


async def unserved(call: Call) -> web.Response:
    name = call.request.match_info["unserved"]
    if name in (DETECTION, CLASSIFICATION):
        raise ApiError(
            405, f"use POST /v1/vision/{name}", "method_not_allowed", headers={"Allow": "POST"}
        )
    raise ApiError(
        404,
        f"this server does not offer /v1/vision/{name[:100]}: it serves "
        "/v1/vision/detection and /v1/vision/classification",
        "not_found",
        kind="not_found",
    )


# -- answers -------------------------------------------------------------------------------
def detection_reply(
    detections: list[Detection], size: tuple[int, int], limit: int, seconds: float
) -> bytes:
    """Best first, at most ``limit``; each box inside the picture with x_min <= x_max and
    y_min <= y_max in whole pixels, and a box with no area left out."""
    width, height = size
    predictions = []
    for d in sorted(detections, key=lambda d: -d.score):
        x_min, y_min, x_max, y_max = (
            min(max(round(value), 0), bound)
            for value, bound in zip(d.box, (width, height, width, height), strict=True)
        )
        if x_min >= x_max or y_min >= y_max:
            continue
        predictions.append(
            {
                "label": d.label,
                "confidence": round(d.score, 4),
                "x_min": x_min,
                "y_min": y_min,
                "x_max": x_max,
                "y_max": y_max,
            }
        )
        if len(predictions) == limit:
            break
    return _document(
        {"success": True, "predictions": predictions, "count": len(predictions)}, seconds
    )


def classification_reply(classes: list[tuple[str, float]], seconds: float) -> bytes:
    predictions = [{"label": label, "confidence": round(score, 4)} for label, score in classes]
    best = predictions[0] if predictions else {"label": None, "confidence": 0.0}
    return _document(
        {"success": True, "predictions": predictions, **best, "count": len(predictions)}, seconds
    )


def error_body(error: ApiError) -> bytes:
    return json.dumps(
        {"success": False, "error": str(error), "code": error.status, "duration": 0}
    ).encode()


def _document(document: dict, seconds: float) -> bytes:
    document["duration"] = round(seconds * 1000)  # milliseconds, as CodeProject.AI's inferenceMs
    return json.dumps(document, separators=(",", ":")).encode()


# -- the protocol --------------------------------------------------------------------------
# A blank form field is as if it were not sent.
_BLANK = {"type": "string", "pattern": "^\\s*$", "description": "blank: the default"}


def schemas(service: Service) -> dict[str, Any]:
    return {
        "VisionForm": {
            "type": "object",
            "required": ["image"],
            "properties": {
                "image": {"type": "string", "format": "binary"},
                "min_confidence": {
                    "anyOf": [{"type": "number", "minimum": 0, "maximum": 1}, _BLANK],
                    "default": DEFAULT_MIN_CONFIDENCE,
                },
                "top_k": {
                    "anyOf": [{"type": "number", "minimum": 1, "maximum": MAX_TOP_K}, _BLANK],
                    "description": "a fraction is cut to a whole number",
                    "default": DEFAULT_TOP_K,
                },
                "api_key": {"type": "string"},
            },
        },
        "Detections": {
            "type": "object",
            "required": ["success", "predictions", "duration"],
            "properties": {
                "success": {"const": True},
                "count": {"type": "integer", "maximum": service.limits.max_detections},
                "duration": {"type": "integer", "description": "milliseconds"},
                "predictions": {
                    "type": "array",
                    "maxItems": service.limits.max_detections,
                    "items": {
                        "type": "object",
                        "required": ["label", "confidence", "x_min", "y_min", "x_max", "y_max"],
                        "properties": {
                            "label": {"type": "string"},
                            "confidence": {"type": "number"},
                            "x_min": {"type": "integer"},
                            "y_min": {"type": "integer"},
                            "x_max": {"type": "integer"},
                            "y_max": {"type": "integer"},
                        },
                    },
                },
            },
        },
        "Classes": {
            "type": "object",
            "required": ["success", "predictions", "label", "confidence", "duration"],
            "properties": {
                "success": {"const": True},
                "label": {"type": ["string", "null"]},
                "confidence": {"type": "number"},
                "count": {"type": "integer"},
                "duration": {"type": "integer"},
                "predictions": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["label", "confidence"],
                        "properties": {
                            "label": {"type": "string"},
                            "confidence": {"type": "number"},
                        },
                    },
                },
            },
        },
        "VisionError": {
            "type": "object",
            "required": ["success", "error", "code"],
            "properties": {
                "success": {"const": False},
                "error": {"type": "string"},
                "code": {"type": "integer"},
                "duration": {"type": "integer"},
            },
        },
    }


def _vision(task: str, handler: Any, summary: str, answer: str) -> Route:
    """DeepStack's form routes: the same form, one task each."""
    return Route(
        "POST",
        f"/v1/vision/{task}",
        handler,
        summary,
        body=UPLOAD,
        request={FORM: "VisionForm", URLENCODED: "VisionForm"},
        inference=True,
        timed=True,
        key_in_form=True,
        responses={
            "200": ("Found.", answer),
            "400": ("Not a form, no image, a broken image, too many pixels.", "VisionError"),
            "404": (f"No {task} model is served.", "VisionError"),
            "415": ("Not a JPEG, PNG, WebP or BMP image.", "VisionError"),
        },
    )


API = HttpApi(
    "deepstack",
    (
        _vision(
            DETECTION,
            detection,
            "Objects in an image, best first (DeepStack / CodeProject.AI).",
            "Detections",
        ),
        _vision(CLASSIFICATION, classification, "The classes of an image, best first.", "Classes"),
        Route(
            "*",
            "/v1/vision/{unserved:.*}",
            unserved,
            "A DeepStack route this server does not offer (scene, face, custom models).",
            body=UPLOAD,
            responses={"404": ("Not offered here.", "VisionError")},
        ),
    ),
    error_body,
    "VisionError",
    schemas,
    ("/v1/vision/",),
)
