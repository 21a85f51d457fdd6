"""llama.cpp's embedding endpoints, as Frigate's semantic search calls them through its
llama.cpp GenAI provider (frigate/genai/plugins/llama_cpp.py in blakeblackshear/frigate):
GET /props for the media marker (random per start unless set, as llama-server's), and
llama.cpp's native POST /embeddings with ``content`` items that are texts or one image each
(``{"prompt_string": "<marker>\\n", "multimodal_data": [base64]}``), answered in content
order as ``[{"index", "embedding": [[...]]}]``. A text is tokenized as OpenAI's route does, a
thumbnail prepared as Immich's route prepares a photo: the same CLIP vector for the same input.
What llama.cpp adds to each entry of GET /v1/models (aliases, modalities) is model_fields here,
which the OpenAI module's list carries. Errors in llama.cpp's shape:
``{"error": {"code", "message", "type"}}``. POST /v1/embeddings stays OpenAI's, as in
llama.cpp."""

from __future__ import annotations

import base64
import binascii
import json
import secrets
import time
from dataclasses import dataclass
from typing import Any

import click
import numpy as np
from aiohttp import web

from ...embedder import Embedder, Prepared, Rejected
from ...embeddings import normalise
from ..errors import ApiError
from ..protocol import JSON, PREPARE_INLINE, UPLOAD, Call, HttpApi, Route, json_response
from ..service import Service

try:  # about 40x faster than json for float vectors; optional (Debian 12 has no orjson)
    import orjson
except ImportError:  # pragma: no cover - depends on the installation
    orjson = None  # type: ignore[assignment]

MARKER_OPTION = "media_marker"
# What a server started without the option says (one per process, as llama-server draws its
# own at start).
_DRAWN_MARKER = f"<__media_{secrets.token_hex(8)}__>"
# llama.cpp's error types by status.
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    501: "not_supported_error",
    503: "unavailable_error",
}


@dataclass(frozen=True)
class Item:
    """One content item: a text, or the bytes of one image."""

    text: str | None = None
    image: bytes | None = None


# -- what llama.cpp adds to OpenAI's model list --------------------------------------------
def model_fields(service: Service, name: str) -> dict[str, Any]:
    """llama.cpp's fields of a /v1/models entry: its aliases (the first model's are the names
    Immich knows it by), the inputs it embeds, and its width."""
    embedder = service.embedder
    if embedder is None:
        return {}
    first = name == service.model_names[0]
    return {
        "aliases": list(embedder.immich_names) if first else [],
        "tags": [],
        "architecture": {
            "input_modalities": list(embedder.modalities),
            "output_modalities": ["embedding"],
        },
        "meta": {"n_embd": embedder.dimensions},
    }


def marker(service: Service) -> str:
    return service.options.get(MARKER_OPTION) or _DRAWN_MARKER


# -- handlers ------------------------------------------------------------------------------
async def props(call: Call) -> web.Response:
    service = call.service
    path_model = call.request.match_info.get("model")
    wanted = [path_model] if path_model else call.request.query.getall("model", [])
    if service.embedder is not None:
        for model in wanted:  # every one a peer repeats, not only the first
            _check_model(model, service.embedder, service.model_names)
    embedder = service.embedder
    name = service.model_names[0] if service.model_names else ""
    document = {
        "default_generation_settings": {"n_ctx": 0},
        "total_slots": 1,
        "model_alias": name,
        "model_path": name,
        "modalities": {
            "vision": embedder is not None and "image" in embedder.modalities,
            "audio": False,
        },
        "chat_template": "",
        "media_marker": marker(service),
        "build_info": "npuctl serve",
    }
    return json_response(json.dumps(document).encode())


async def embeddings(call: Call) -> web.Response:
    body = await call.body()
    service = call.service
    embedder = _embedder(service)
    if len(body) > PREPARE_INLINE or b"multimodal_data" in body:  # thumbnails to decode
        prepared = await call.blocking(prepare, service, embedder, body)
    else:  # a few short texts: tokenized here, cheaper than a thread's hand-over
        prepared = prepare(service, embedder, body)
    works = service.submit([(embedder.keys[item.modality], [item.tensor]) for item in prepared])
    results = await service.wait(works)
    return json_response(answer(service, embedder, prepared, results))


def _embedder(service: Service) -> Embedder:
    if service.embedder is None:
        raise ApiError(
            404,
            "this server's NPU runs no CLIP model, so it embeds nothing: leave Frigate's "
            "semantic search on its own model (semantic_search: model: jinav2)",
            "model_not_found",
            kind="model_not_found",
        )
    return service.embedder


def prepare(service: Service, embedder: Embedder, body: bytes) -> list[Prepared]:
    """The request's items as tensors, in content order (on a request thread: thumbnails are
    decoded here)."""
    started = time.perf_counter()
    items = parse(body, embedder, service.model_names, marker(service), service.limits)
    prepared = []
    for index, item in enumerate(items):
        try:
            prepared.append(_tensor(service, embedder, item))
        except Rejected as rejected:
            raise ApiError(400, f"content[{index}]: {rejected}", rejected.code) from None
        except ApiError as error:  # the thumbnail's decode
            raise ApiError(
                error.status, f"content[{index}]: {error}", error.code, kind=error.kind
            ) from None
    service.metrics.stage("preprocess", time.perf_counter() - started)
    return prepared


def _tensor(service: Service, embedder: Embedder, item: Item) -> Prepared:
    if item.text is not None:
        return embedder.prepare_text(item.text, True)  # CLIP reads its window, as Jina's does
    if "image" not in embedder.modalities:
        raise Rejected("this server's CLIP embeds text only", "invalid_value")
    assert item.image is not None
    picture = service.decode(item.image, "the image")
    size = picture.size
    try:
        return embedder.prepare_photo(picture)  # as the Immich route: the same vector
    finally:
        del picture
        service.done_with(size)


def answer(
    service: Service, embedder: Embedder, prepared: list[Prepared], results: list[list[Any]]
) -> bytes:
    encoded = time.perf_counter()
    vectors = [
        normalise(embedder.vector(item.modality, outputs)).astype(np.float32, copy=False)
        for item, outputs in zip(prepared, results, strict=True)
    ]
    # llama-server's native answer: per item its pooled vector as the one row of a matrix.
    document = [
        {"index": index, "embedding": [vector if orjson is not None else vector.tolist()]}
        for index, vector in enumerate(vectors)
    ]
    if orjson is not None:
        body = orjson.dumps(document, option=orjson.OPT_SERIALIZE_NUMPY)
    else:
        body = json.dumps(document, separators=(",", ":")).encode()
    metrics = service.metrics
    metrics.stage("serialize", time.perf_counter() - encoded)
    for item in prepared:
        metrics.input(item.modality)
        metrics.model_answered(embedder.keys[item.modality], "ok")
    return body


# -- requests ------------------------------------------------------------------------------
def parse(
    body: bytes, embedder: Embedder, model_names: tuple[str, ...], media_marker: str, limits: Any
) -> list[Item]:
    """The content items, or ApiError (400/404) naming the offending one."""
    try:
        document = orjson.loads(body) if orjson is not None else json.loads(body)
    except (ValueError, RecursionError) as error:
        raise _invalid(f"the body is not valid JSON ({error})") from None
    if not isinstance(document, dict):
        raise _invalid("the body must be a JSON object with 'content'")
    model = document.get("model")
    if model is not None:
        _check_model(model, embedder, model_names)
    content = document["content"] if "content" in document else document.get("input")
    if isinstance(content, str | dict):
        content = [content]
    if not isinstance(content, list) or not content:
        raise _invalid("'content' must be a text, an item, or a non-empty list of them")
    if len(content) > limits.max_inputs:
        raise _invalid(
            f"{len(content)} items in one request; this server takes at most "
            f"{limits.max_inputs} (split the request, or raise --max-inputs)"
        )
    items = [_item(index, value, media_marker) for index, value in enumerate(content)]
    images = sum(1 for item in items if item.image is not None)
    if images > limits.max_images:
        raise _invalid(
            f"{images} images in one request; this server takes at most {limits.max_images} "
            "(split the request, or raise --max-images)"
        )
    return items


def _item(index: int, value: Any, media_marker: str) -> Item:
    where = f"content[{index}]"
    if isinstance(value, str):
        return _text(where, value, media_marker)
    if not isinstance(value, dict) or not isinstance(value.get("prompt_string"), str):
        raise _invalid(f"{where} must be a text or an object with a 'prompt_string' text")
    prompt, data = value["prompt_string"], value.get("multimodal_data")
    if data is None:
        return _text(where, prompt, media_marker)
    if not isinstance(data, list) or not all(isinstance(entry, str) for entry in data):
        raise _invalid(f"{where}: 'multimodal_data' must be a list of base64 texts")
    markers = prompt.count(media_marker)
    if markers != len(data):
        raise _invalid(
            f"{where}: {len(data)} images but {markers} media markers in 'prompt_string': this "
            f"server's marker is {media_marker} (GET /props gives it; it changes when the "
            "server restarts)"
        )
    if len(data) != 1 or prompt.strip() != media_marker:
        raise _invalid(
            f"{where}: an item is one text or one image alone ('prompt_string' the media "
            "marker only): CLIP embeds texts and images apart"
        )
    try:
        return Item(image=base64.b64decode(data[0], validate=True))
    except (binascii.Error, ValueError):
        raise _invalid(f"{where}: the image is not valid base64") from None


def _text(where: str, text: str, media_marker: str) -> Item:
    if media_marker in text:
        raise _invalid(f"{where}: a media marker without 'multimodal_data'")
    if not text.strip():
        raise _invalid(f"{where}: the text is empty")
    return Item(text=text)


def _check_model(model: object, embedder: Embedder, model_names: tuple[str, ...]) -> None:
    if not isinstance(model, str):
        raise _invalid("'model' must be a string: a name from GET /v1/models")
    if model not in (*model_names, *embedder.immich_names):
        served = ", ".join((*model_names, *embedder.immich_names))
        raise ApiError(
            404,
            f"the model {str(model)[:100]!r} is not served here: this server has {served} "
            "(GET /v1/models)",
            "model_not_found",
            kind="model_not_found",
        )


def _invalid(message: str) -> ApiError:
    return ApiError(400, message, "invalid_request")


def error_body(error: ApiError) -> bytes:
    kind = _ERROR_TYPES.get(error.status)
    if kind is None:
        kind = "server_error" if error.status >= 500 else "invalid_request_error"
    document = {"error": {"code": error.status, "message": str(error), "type": kind}}
    return json.dumps(document).encode()


# -- the protocol --------------------------------------------------------------------------
def _media_marker_option(command: Any) -> Any:
    return click.option(
        "--media-marker",
        MARKER_OPTION,
        default=None,
        envvar=["NPUCTL_SERVE_MEDIA_MARKER", "LLAMA_MEDIA_MARKER"],
        show_envvar=True,
        metavar="TEXT",
        help="The media marker of llama.cpp's /embeddings (what Frigate's semantic search "
        "puts in place of each thumbnail) [default: random per start, as llama-server's].",
    )(command)


def schemas(service: Service) -> dict[str, Any]:
    item = {
        "oneOf": [
            {"type": "string", "pattern": "\\S"},
            {
                "type": "object",
                "required": ["prompt_string"],
                "properties": {
                    "prompt_string": {"type": "string"},
                    "multimodal_data": {
                        "type": "array",
                        "items": {"type": "string"},
                        "minItems": 1,
                        "maxItems": 1,
                    },
                },
            },
        ]
    }
    return {
        "LlamaEmbeddingsRequest": {
            "type": "object",
            "required": ["content"],
            "properties": {
                # Only the names this server takes (null: as if not given).
                "model": {"enum": [*service.model_names, *service.embedder.immich_names, None]}
                if service.embedder
                else {"type": "string"},
                "content": {
                    "oneOf": [
                        item,
                        {
                            "type": "array",
                            "items": item,
                            "minItems": 1,
                            "maxItems": service.limits.max_inputs,
                        },
                    ]
                },
            },
        },
        "LlamaEmbeddings": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["index", "embedding"],
                "properties": {
                    "index": {"type": "integer"},
                    "embedding": {
                        "type": "array",
                        "items": {"type": "array", "items": {"type": "number"}},
                    },
                },
            },
        },
        "LlamaProps": {
            "type": "object",
            "required": ["media_marker", "modalities"],
            "properties": {
                "media_marker": {"type": "string"},
                "modalities": {"type": "object"},
                "model_alias": {"type": "string"},
            },
        },
        "LlamaError": {
            "type": "object",
            "required": ["error"],
            "properties": {
                "error": {
                    "type": "object",
                    "required": ["code", "message", "type"],
                    "properties": {
                        "code": {"type": "integer"},
                        "message": {"type": "string"},
                        "type": {"type": "string"},
                    },
                }
            },
        },
    }


_PROPS_RESPONSES: dict[str, tuple[str, str | None]] = {
    "200": ("The server's properties, the media marker among them.", "LlamaProps"),
    "404": ("No such model.", "LlamaError"),
}

API = HttpApi(
    "llamacpp",
    (
        Route(
            "GET",
            "/props",
            props,
            "llama.cpp's server properties: the media marker (also while the models load).",
            responses=_PROPS_RESPONSES,
        ),
        Route(
            "GET",
            "/upstream/{model}/props",
            props,
            "The same, where llama-swap answers it.",
            responses=_PROPS_RESPONSES,
        ),
        Route(
            "POST",
            "/embeddings",
            embeddings,
            "CLIP embeddings of texts and images, in content order (llama.cpp's native "
            "endpoint, as Frigate's semantic search calls it).",
            body=UPLOAD,
            request={JSON: "LlamaEmbeddingsRequest"},
            inference=True,
            parsed=True,
            responses={
                "200": ("One vector per item, in content order.", "LlamaEmbeddings"),
                "400": ("Invalid content, or a stale media marker.", "LlamaError"),
                "404": ("No such model, or no CLIP on this NPU.", "LlamaError"),
                "415": ("An image in none of the formats served.", "LlamaError"),
            },
        ),
    ),
    error_body,
    "LlamaError",
    schemas,
    ("/embeddings", "/embeddings/", "/props", "/props/", "/upstream/"),
    options=(_media_marker_option,),
)
