"""The OpenAI embeddings API: requests checked into inputs, vectors encoded into replies, and
errors in OpenAI's shape. No I/O here, so every rule is tested directly and over HTTP."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..embedder import Embedder, Prepared, Rejected

try:  # about 40x faster than json for float vectors; optional (Debian 12 has no orjson)
    import orjson
except ImportError:  # pragma: no cover - depends on the installation
    orjson = None  # type: ignore[assignment]


class ApiError(Exception):
    """An answer other than 200, as OpenAI shapes it."""

    def __init__(
        self,
        status: int,
        message: str,
        code: str,
        param: str | None = None,
        kind: str = "invalid_request",
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.param = param
        self.kind = kind  # the metrics label
        self.headers = headers or {}

    def body(self) -> bytes:
        error_type = "invalid_request_error" if self.status < 500 else "server_error"
        if self.status == 429:
            error_type = "rate_limit_error"
        document = {
            "error": {
                "message": str(self),
                "type": error_type,
                "param": self.param,
                "code": self.code,
            }
        }
        return json.dumps(document).encode()


@dataclass(frozen=True)
class Request:
    inputs: list[Prepared]
    encoding: str  # "float" | "base64"


ENCODINGS = ("float", "base64")


def parse(
    body: bytes,
    embedder: Embedder,
    model_names: tuple[str, ...],
    max_inputs: int,
    truncate_default: bool,
    max_images: int = 8,
    decoding: Callable[[], AbstractContextManager[object]] = nullcontext,
) -> Request:
    """The request's inputs as tensors, or ApiError (400) naming the offending field."""
    try:
        document = orjson.loads(body) if orjson is not None else json.loads(body)
    except (ValueError, RecursionError) as error:
        raise ApiError(400, f"the body is not valid JSON ({error})", "invalid_json") from None
    if not isinstance(document, dict):
        raise ApiError(400, "the body must be a JSON object", "invalid_json")
    model = document.get("model")
    if model is not None and model not in model_names:
        raise ApiError(
            404,
            f"the model {str(model)[:100]!r} does not exist: this server has "
            f"{', '.join(model_names)} (GET /v1/models)",
            "model_not_found",
            "model",
            kind="model_not_found",
        )
    encoding = document.get("encoding_format", "float")
    if encoding not in ENCODINGS:
        raise ApiError(
            400, "encoding_format must be 'float' or 'base64'", "invalid_value", "encoding_format"
        )
    dimensions = document.get("dimensions")
    if dimensions is not None and dimensions != embedder.dimensions:
        raise ApiError(
            400,
            f"{model_names[0]} gives {embedder.dimensions} dimensions only; leave "
            "'dimensions' out or set it to that",
            "invalid_value",
            "dimensions",
        )
    truncate = document.get("truncate", truncate_default)
    if not isinstance(truncate, bool):
        raise ApiError(400, "truncate must be true or false", "invalid_type", "truncate")
    modality = document.get("modality", "text")
    if modality not in embedder.modalities:
        raise ApiError(
            400,
            f"modality must be one of {', '.join(embedder.modalities)}",
            "invalid_value",
            "modality",
        )
    items = _items(document.get("input"), max_inputs)
    images = sum(1 for item in items if _is_image(item, modality))
    if images > max_images:
        raise ApiError(
            400,
            f"{images} images in one request; this server takes at most {max_images} "
            "(split the request, or raise --max-images)",
            "too_many_images",
            "input",
        )
    prepared = []
    for index, item in enumerate(items):
        try:
            with decoding() if _is_image(item, modality) else nullcontext():
                prepared.append(_prepare(embedder, item, modality, truncate))
        except Rejected as rejected:
            status = 415 if rejected.code == "unsupported_media_type" else 400
            raise ApiError(status, f"input[{index}]: {rejected}", rejected.code, "input") from None
    return Request(prepared, encoding)


def _is_image(item: Any, modality: str) -> bool:
    return isinstance(item, str) and (modality == "image" or item.startswith("data:image/"))


def _items(value: Any, max_inputs: int) -> list[Any]:
    if isinstance(value, str) or (
        isinstance(value, list) and value and all(_is_token(item) for item in value)
    ):
        return [value]  # one text, or one list of token ids
    if not isinstance(value, list) or not value:
        raise ApiError(
            400,
            "input must be a string, a non-empty list of strings, or token id lists",
            "invalid_type",
            "input",
        )
    if len(value) > max_inputs:
        raise ApiError(
            400,
            f"{len(value)} inputs in one request; this server takes at most {max_inputs} "
            "(split the request, or raise --max-inputs)",
            "too_many_inputs",
            "input",
        )
    return value


def _is_token(item: Any) -> bool:
    return isinstance(item, int) and not isinstance(item, bool)


def _prepare(embedder: Embedder, item: Any, modality: str, truncate: bool) -> Prepared:
    if isinstance(item, list) and item and all(_is_token(token) for token in item):
        if modality != "text":
            raise Rejected("token ids are text: leave 'modality' out", "invalid_type")
        return embedder.prepare_token_ids(item, truncate)
    if not isinstance(item, str):
        raise Rejected("each input must be a string or a list of token ids", "invalid_type")
    if modality == "image" or item.startswith("data:image/"):
        if "image" not in embedder.modalities:
            raise Rejected("this model embeds text only", "invalid_value")
        return embedder.prepare_image(image_bytes(item))
    return embedder.prepare_text(item, truncate)


def image_bytes(item: str) -> bytes:
    """A data: URI or bare base64; URLs are refused (the server fetches nothing)."""
    if item.startswith(("http://", "https://")):
        raise Rejected(
            "npuctl serve does not download images: send the bytes as a data: URI "
            "(data:image/jpeg;base64,...) or as base64",
            "invalid_value",
        )
    payload = item
    if item.startswith("data:"):
        header, comma, payload = item.partition(",")
        if not comma or not header.endswith(";base64"):
            raise Rejected("a data: URI must be base64 (data:image/png;base64,...)")
    try:
        return base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise Rejected("the image is not valid base64") from None


def encoder(encoding: str) -> Callable[[np.ndarray], Any]:
    if encoding == "base64":
        return _base64
    if orjson is not None:
        return lambda vector: vector.astype(np.float32, copy=False)
    return lambda vector: vector.tolist()


def _base64(vector: np.ndarray) -> str:
    little_endian = vector.astype("<f4", copy=False)
    return base64.b64encode(little_endian.tobytes()).decode("ascii")


def reply(vectors: list[Any], model: str, tokens: int) -> bytes:
    document = {
        "object": "list",
        "data": [
            {"object": "embedding", "index": index, "embedding": vector}
            for index, vector in enumerate(vectors)
        ],
        "model": model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }
    if orjson is not None:
        return orjson.dumps(document, option=orjson.OPT_SERIALIZE_NUMPY)
    return json.dumps(document, separators=(",", ":")).encode()
