"""OpenAI's embeddings API (POST /v1/embeddings, GET /v1/models): texts, token ids and images
in, unit vectors out as floats or little-endian float32 base64 (what the official client asks
for by default), and errors in OpenAI's shape."""

from __future__ import annotations

import base64
import binascii
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from aiohttp import web

from ...embedder import Embedder, Prepared, Rejected
from ...embeddings import normalise
from ..errors import ApiError
from ..protocol import (
    JSON,
    PREPARE_INLINE,
    SERVER_ERROR_SCHEMA,
    TEXT,
    Call,
    HttpApi,
    Route,
    json_response,
    server_error_body,
)
from ..service import Service
from . import llamacpp

try:  # about 40x faster than json for float vectors; optional (Debian 12 has no orjson)
    import orjson
except ImportError:  # pragma: no cover - depends on the installation
    orjson = None  # type: ignore[assignment]

ENCODINGS = ("float", "base64")


@dataclass(frozen=True)
class Asked:
    inputs: list[Prepared]
    encoding: str  # "float" | "base64"


# -- handlers ------------------------------------------------------------------------------
def _model_list(service: Service) -> list[dict[str, Any]]:
    """OpenAI's entries, with what llama.cpp adds to each (Frigate's GenAI provider reads
    it)."""
    return [
        {
            "id": name,
            "object": "model",
            "created": service.created,
            "owned_by": "npuctl",
            **llamacpp.model_fields(service, name),
        }
        for name in service.model_names
    ]


async def models(call: Call) -> web.Response:
    return json_response(_dumps({"object": "list", "data": _model_list(call.service)}))


async def model(call: Call) -> web.Response:
    wanted = call.request.match_info["model"]
    for entry in _model_list(call.service):
        if wanted == entry["id"] or wanted in entry.get("aliases", ()):  # as the list names it
            return json_response(_dumps(entry))
    raise ApiError(
        404,
        f"the model {wanted[:100]!r} does not exist",
        "model_not_found",
        kind="model_not_found",
    )


async def embeddings(call: Call) -> web.Response:
    body = await call.body()
    service = call.service
    embedder = _embedder(service)
    if len(body) > PREPARE_INLINE or b"image" in body:  # images to decode, or much to parse
        asked = await call.blocking(prepare, service, embedder, body)
    else:  # a few short texts: tokenized here, cheaper than a thread's hand-over
        asked = prepare(service, embedder, body)
    works = service.submit([(embedder.keys[item.modality], [item.tensor]) for item in asked.inputs])
    results = await service.wait(works)
    return json_response(answer(service, embedder, asked, results))


def _embedder(service: Service) -> Embedder:
    if service.embedder is None:
        raise ApiError(
            404,
            "this server has no embedding model: start it with an embedding model in "
            "--models (POST /v2/repository/index lists what it serves)",
            "model_not_found",
            kind="model_not_found",
        )
    return service.embedder


def prepare(service: Service, embedder: Embedder, body: bytes) -> Asked:
    """The request's inputs as tensors (pictures decoded within the server's budget)."""
    started = time.perf_counter()
    limits = service.limits
    asked = parse(
        body,
        embedder,
        service.model_names,
        service.limits.max_inputs,
        service.truncate,
        limits.max_images,
        lambda data: service.decode(data, "the image"),
    )
    service.metrics.stage("preprocess", time.perf_counter() - started)
    return asked


def answer(
    service: Service, embedder: Embedder, asked: Asked, results: list[list[np.ndarray]]
) -> bytes:
    encoded = time.perf_counter()
    encode = encoder(asked.encoding)
    tokens = sum(item.tokens for item in asked.inputs)
    vectors = [
        encode(normalise(embedder.vector(item.modality, outputs)))
        for item, outputs in zip(asked.inputs, results, strict=True)
    ]
    body = reply(vectors, service.model_names[0], tokens)
    metrics = service.metrics
    metrics.stage("serialize", time.perf_counter() - encoded)
    for item in asked.inputs:
        metrics.input(item.modality)
        metrics.model_answered(embedder.keys[item.modality], "ok")
    metrics.tokens.inc(tokens)
    return body


# -- requests ------------------------------------------------------------------------------
def parse(
    body: bytes,
    embedder: Embedder,
    model_names: tuple[str, ...],
    max_inputs: int,
    truncate_default: bool,
    max_images: int,
    decode: Callable[[bytes], Any],
) -> Asked:
    """The request's inputs as tensors, or ApiError (400) naming the offending field."""
    try:
        document = orjson.loads(body) if orjson is not None else json.loads(body)
    except (ValueError, RecursionError) as error:
        raise ApiError(400, f"the body is not valid JSON ({error})", "invalid_json") from None
    if not isinstance(document, dict):
        raise ApiError(400, "the body must be a JSON object", "invalid_json")
    _check_model(document.get("model"), model_names)
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
            prepared.append(_prepare(embedder, item, modality, truncate, decode))
        except Rejected as rejected:
            status = 415 if rejected.code == "unsupported_media_type" else 400
            raise ApiError(status, f"input[{index}]: {rejected}", rejected.code, "input") from None
        except ApiError as error:  # the picture's decode
            raise ApiError(
                error.status, f"input[{index}]: {error}", error.code, "input", error.kind
            ) from None
    return Asked(prepared, encoding)


def _check_model(model: object, model_names: tuple[str, ...]) -> None:
    if model is not None and model not in model_names:
        raise ApiError(
            404,
            f"the model {str(model)[:100]!r} does not exist: this server has "
            f"{', '.join(model_names)} (GET /v1/models)",
            "model_not_found",
            "model",
            kind="model_not_found",
        )


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


def _prepare(
    embedder: Embedder,
    item: Any,
    modality: str,
    truncate: bool,
    decode: Callable[[bytes], Any],
) -> Prepared:
    if isinstance(item, list) and item and all(_is_token(token) for token in item):
        if modality != "text":
            raise Rejected("token ids are text: leave 'modality' out", "invalid_type")
        return embedder.prepare_token_ids(item, truncate)
    if not isinstance(item, str):
        raise Rejected("each input must be a string or a list of token ids", "invalid_type")
    if modality == "image" or item.startswith("data:image/"):
        if "image" not in embedder.modalities:
            raise Rejected("this model embeds text only", "invalid_value")
        return embedder.prepare_image(decode(image_bytes(item)))
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


# -- answers -------------------------------------------------------------------------------
def encoder(encoding: str) -> Callable[[np.ndarray], Any]:
    if encoding == "base64":
        return _base64
    if orjson is not None:
        return lambda vector: vector.astype(np.float32, copy=False)
    return lambda vector: vector.tolist()


def _base64(vector: np.ndarray) -> str:
    little_endian = vector.astype("<f4", copy=False)
    return base64.b64encode(little_endian.tobytes()).decode("ascii")


def reply(vectors: list[Any], model_name: str, tokens: int) -> bytes:
    document = {
        "object": "list",
        "data": [
            {"object": "embedding", "index": index, "embedding": vector}
            for index, vector in enumerate(vectors)
        ],
        "model": model_name,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }
    if orjson is not None:
        return orjson.dumps(document, option=orjson.OPT_SERIALIZE_NUMPY)
    return json.dumps(document, separators=(",", ":")).encode()


def _dumps(document: object) -> bytes:
    return json.dumps(document, separators=(",", ":")).encode()


# -- the protocol --------------------------------------------------------------------------
# A text must hold more than white space; a token id is an index of the model's vocabulary.
_TEXT = {"type": "string", "pattern": "\\S"}
_TOKEN = {"type": "integer", "minimum": 0}


def schemas(service: Service) -> dict[str, Any]:
    return {
        "EmbeddingsRequest": {
            "type": "object",
            "required": ["input"],
            "properties": {
                "input": {
                    "oneOf": [
                        _TEXT,
                        {
                            "type": "array",
                            "items": _TEXT,
                            "minItems": 1,
                            "maxItems": service.limits.max_inputs,
                        },
                        {"type": "array", "items": _TOKEN, "minItems": 1},
                        {
                            "type": "array",
                            "items": {"type": "array", "items": _TOKEN},
                            "minItems": 1,
                            "maxItems": service.limits.max_inputs,
                        },
                    ]
                },
                # Only the values this server takes (null: as if not given).
                "model": {"enum": [*service.model_names, None]}
                if service.model_names
                else {"type": "string"},
                "encoding_format": {"enum": list(ENCODINGS)},
                "dimensions": {"enum": [service.embedder.dimensions, None]}
                if service.embedder
                else {"type": "integer"},
                "modality": {"enum": ["text", "image"]},
                "truncate": {"type": "boolean"},
            },
        },
        "Embeddings": {
            "type": "object",
            "required": ["object", "data", "model", "usage"],
            "properties": {
                "object": {"const": "list"},
                "data": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["object", "index", "embedding"],
                        "properties": {
                            "object": {"const": "embedding"},
                            "index": {"type": "integer"},
                            "embedding": {
                                "oneOf": [
                                    {"type": "array", "items": {"type": "number"}},
                                    {"type": "string"},
                                ]
                            },
                        },
                    },
                },
                "model": {"type": "string"},
                "usage": {"type": "object"},
            },
        },
        "Model": {
            "type": "object",
            "required": ["id", "object", "created", "owned_by"],
            "properties": {
                "id": {"type": "string"},
                "object": {"const": "model"},
                "created": {"type": "integer"},
                "owned_by": {"type": "string"},
                # llama.cpp's (see .llamacpp)
                "aliases": {"type": "array", "items": {"type": "string"}},
                "tags": {"type": "array", "items": {"type": "string"}},
                "architecture": {"type": "object"},
                "meta": {"type": "object"},
            },
        },
        "ModelList": {
            "type": "object",
            "required": ["object", "data"],
            "properties": {
                "object": {"const": "list"},
                "data": {"type": "array", "items": {"$ref": "#/components/schemas/Model"}},
            },
        },
    }


API = HttpApi(
    "openai",
    (
        Route(
            "GET",
            "/v1/models",
            models,
            "The embedding models (OpenAI).",
            responses={"200": ("Models.", "ModelList")},
        ),
        Route(
            "GET",
            "/v1/models/{model}",
            model,
            "One embedding model (OpenAI).",
            responses={"200": ("The model.", "Model"), "404": ("No such model.", "OpenAIError")},
        ),
        Route(
            "POST",
            "/v1/embeddings",
            embeddings,
            "Embeddings of texts and images (OpenAI).",
            body=TEXT,
            request={JSON: "EmbeddingsRequest"},
            inference=True,
            parsed=True,
            responses={
                "200": ("The vectors.", "Embeddings"),
                "400": ("Invalid input.", "OpenAIError"),
                "404": ("No such embedding model.", "OpenAIError"),
                "415": ("An image in none of the formats served.", "OpenAIError"),
            },
        ),
    ),
    server_error_body,
    SERVER_ERROR_SCHEMA,
    schemas,
    ("/v1/",),
)
