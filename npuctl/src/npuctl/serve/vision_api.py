"""The vision API of DeepStack and CodeProject.AI, which Frigate's deepstack detector and Home
Assistant's DeepStack integrations call: a form with the image in the field 'image', optional
'min_confidence' and 'api_key'; answers {"success": ..., "predictions": [...], "duration": ...}
with boxes in the sent image's pixels, best first, at most as many as Frigate reads. No I/O
here: the form comes read (aiohttp parses it)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..vision import Detection

DEFAULT_MIN_CONFIDENCE = 0.4  # DeepStack's and CodeProject.AI's default
DEFAULT_TOP_K = 5


class VisionError(ValueError):
    """A request the API refuses: 400 with {"success": false, "error": ...}."""


@dataclass(frozen=True)
class VisionRequest:
    image: bytes
    min_confidence: float
    api_key: bytes | None
    top_k: int


def parse(fields: Mapping[str, bytes]) -> VisionRequest:
    """The request from the form's fields (the first of each name)."""
    image = fields.get("image")
    if not image:
        raise VisionError("the form has no image: send it as the file field 'image'")
    return VisionRequest(
        image,
        _number(fields, "min_confidence", DEFAULT_MIN_CONFIDENCE, 0.0, 1.0),
        fields.get("api_key") or None,
        int(_number(fields, "top_k", DEFAULT_TOP_K, 1, 1000)),
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
        raise VisionError(f"{name} must be a number from {low:g} to {high:g}") from None
    if not (math.isfinite(value) and low <= value <= high):
        raise VisionError(f"{name} must be a number from {low:g} to {high:g}")
    return value


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


def error_body(status: int, message: str) -> bytes:
    return json.dumps({"success": False, "error": message, "code": status, "duration": 0}).encode()


def _document(document: dict, seconds: float) -> bytes:
    document["duration"] = round(seconds * 1000)  # milliseconds, as CodeProject.AI's inferenceMs
    return json.dumps(document, separators=(",", ":")).encode()
