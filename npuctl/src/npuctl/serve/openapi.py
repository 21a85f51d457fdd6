"""/openapi.json: every route the server answers, described in OpenAPI 3.1 from the same data
the routes use (the served models, the public paths), so the document cannot drift from the
server; the tests check it against the routes and against recorded answers."""

from __future__ import annotations

import copy
import json
from typing import TYPE_CHECKING, Any

from .. import __version__
from . import routes
from .routes import PUBLIC_DEFAULT

if TYPE_CHECKING:
    from .service import Service

_JSON = "application/json"


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _answer(description: str, schema: str | None = None, kind: str = _JSON) -> dict[str, Any]:
    answer: dict[str, Any] = {"description": description}
    if schema is not None:
        answer["content"] = {kind: {"schema": _ref(schema)}}
    return answer


# A text must hold more than white space; a token id is an index of the model's vocabulary.
_TEXT = {"type": "string", "pattern": "\\S"}
_TOKEN = {"type": "integer", "minimum": 0}
_BLANK = {"type": "string", "pattern": "^\\s*$", "description": "blank: the default"}

SCHEMAS: dict[str, Any] = {
    "Health": {
        "type": "object",
        "required": ["status"],
        "properties": {"status": {"type": "string"}, "reason": {"type": "string"}},
    },
    "OpenAIError": {
        "type": "object",
        "required": ["error"],
        "properties": {
            "error": {
                "type": "object",
                "required": ["message", "type", "code"],
                "properties": {
                    "message": {"type": "string"},
                    "type": {"type": "string"},
                    "param": {"type": ["string", "null"]},
                    "code": {"type": "string"},
                },
            }
        },
    },
    "EmbeddingsRequest": {
        "type": "object",
        "required": ["input"],
        "properties": {
            "input": {
                "oneOf": [
                    _TEXT,
                    {"type": "array", "items": _TEXT, "minItems": 1},
                    {"type": "array", "items": _TOKEN, "minItems": 1},
                    {
                        "type": "array",
                        "items": {"type": "array", "items": _TOKEN},
                        "minItems": 1,
                    },
                ]
            },
            "model": {"type": "string"},
            "encoding_format": {"enum": ["float", "base64"]},
            "dimensions": {"type": "integer"},
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
        },
    },
    "ModelList": {
        "type": "object",
        "required": ["object", "data"],
        "properties": {
            "object": {"const": "list"},
            "data": {"type": "array", "items": _ref("Model")},
        },
    },
    "VisionForm": {
        "type": "object",
        "required": ["image"],
        "properties": {
            "image": {"type": "string", "format": "binary"},
            "min_confidence": {
                "anyOf": [{"type": "number", "minimum": 0, "maximum": 1}, _BLANK],
                "default": 0.4,
            },
            "top_k": {
                "anyOf": [{"type": "number", "minimum": 1, "maximum": 1000}, _BLANK],
                "description": "a fraction is cut to a whole number",
                "default": 5,
            },
            "api_key": {"type": "string"},
        },
    },
    "Detections": {
        "type": "object",
        "required": ["success", "predictions", "duration"],
        "properties": {
            "success": {"const": True},
            "count": {"type": "integer"},
            "duration": {"type": "integer", "description": "milliseconds"},
            "predictions": {
                "type": "array",
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
                    "properties": {"label": {"type": "string"}, "confidence": {"type": "number"}},
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
    "ImmichForm": {
        "type": "object",
        "required": ["entries"],
        "properties": {
            "entries": {
                "type": "string",
                "description": 'JSON: {"clip": {"visual": {"modelName": NAME}}} with an image, '
                'or {"clip": {"textual": {"modelName": NAME}}} with a text.',
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
    "V2Server": {
        "type": "object",
        "required": ["name", "version", "extensions"],
        "properties": {
            "name": {"type": "string"},
            "version": {"type": "string"},
            "extensions": {"type": "array", "items": {"type": "string"}},
        },
    },
    "V2Tensor": {
        "type": "object",
        "required": ["name", "datatype", "shape"],
        "properties": {
            "name": {"type": "string"},
            "datatype": {"type": "string"},
            "shape": {"type": "array", "items": {"type": "integer"}},
            "parameters": {"type": "object"},
            "data": {"type": "array"},
        },
    },
    "V2Model": {
        "type": "object",
        "required": ["name", "versions", "platform", "inputs", "outputs"],
        "properties": {
            "name": {"type": "string"},
            "versions": {"type": "array", "items": {"type": "string"}},
            "platform": {"type": "string"},
            "inputs": {"type": "array", "items": _ref("V2Tensor")},
            "outputs": {"type": "array", "items": _ref("V2Tensor")},
        },
    },
    "V2InferRequest": {
        "type": "object",
        "required": ["inputs"],
        "properties": {
            "id": {"type": "string"},
            "parameters": {"type": "object"},
            "inputs": {"type": "array", "items": _ref("V2Tensor"), "minItems": 1},
            "outputs": {"type": "array", "items": {"type": "object"}},
        },
    },
    "V2InferResponse": {
        "type": "object",
        "required": ["model_name", "outputs"],
        "properties": {
            "model_name": {"type": "string"},
            "model_version": {"type": "string"},
            "id": {"type": "string"},
            "outputs": {"type": "array", "items": _ref("V2Tensor")},
        },
    },
    "V2Index": {
        "type": "array",
        "items": {
            "type": "object",
            "required": ["name"],
            "properties": {
                "name": {"type": "string"},
                "version": {"type": "string"},
                "state": {"type": "string"},
            },
        },
    },
    "V2Statistics": {
        "type": "object",
        "required": ["model_stats"],
        "properties": {"model_stats": {"type": "array", "items": {"type": "object"}}},
    },
    "V2Config": {
        "type": "object",
        "required": ["name", "platform", "input", "output"],
        "properties": {
            "name": {"type": "string"},
            "platform": {"type": "string"},
            "max_batch_size": {"type": "integer"},
            "input": {"type": "array", "items": {"type": "object"}},
            "output": {"type": "array", "items": {"type": "object"}},
        },
    },
    "V2Error": {
        "type": "object",
        "required": ["error"],
        "properties": {"error": {"type": "string"}},
    },
}

_TIMED = {
    "Server-Timing": {
        "description": "Where the request's time went, in milliseconds (W3C Server-Timing): "
        "preprocess, queue, npu, postprocess, total; a vision answer adds decode and cpu "
        "(the CPU time of the request's own thread apart from the decode).",
        "schema": {"type": "string"},
    }
}
_ERROR_SCHEMA = {
    routes.OPENAI: "OpenAIError",
    routes.DEEPSTACK: "VisionError",
    routes.V2: "V2Error",
    routes.IMMICH: "ImmichError",
    routes.SERVER: "OpenAIError",
}
_RETRY = {"Retry-After": {"description": "Seconds to wait.", "schema": {"type": "string"}}}


def _operation(
    route: routes.Route, names: list[str], secured: bool, public: frozenset[str]
) -> dict[str, Any]:
    error = _ERROR_SCHEMA[route.api]
    responses = {
        status: _answer(text, schema) for status, (text, schema) in route.responses.items()
    }
    if route.timed:
        responses["200"]["headers"] = _TIMED
    if route.body is not None:
        responses["411"] = _answer("No Content-Length and no chunked body.", error)
        responses["413"] = _answer("The body is over this route's limit.", error)
        responses["408"] = _answer("The body took too long to arrive.", error)
    if route.inference:
        responses["429"] = {**_answer("The NPU's queue is full.", error), "headers": _RETRY}
        responses["504"] = _answer("The NPU did not answer in time.", error)
    responses["503"] = responses.get("503") or {
        **_answer("Loading, shutting down, or the NPU failed.", error),
        "headers": _RETRY,
    }
    operation: dict[str, Any] = {"summary": route.summary, "responses": responses}
    if secured:
        if route.public is None or route.public not in public:
            responses["401"] = _answer("A missing or wrong API key.", error)
        else:
            operation["security"] = []
    parameters = [_parameter(name, names) for name in _path_parameters(route.path)]
    if parameters:
        operation["parameters"] = parameters
    if route.request:
        operation["requestBody"] = {
            "required": True,
            "content": {
                media: ({"schema": _ref(schema)} if schema else {})
                for media, schema in route.request.items()
            },
        }
    return operation


def _path_parameters(path: str) -> list[str]:
    return [part[1:-1].split(":")[0] for part in path.split("/") if part.startswith("{")]


def _parameter(name: str, names: list[str]) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    if name == "name" and names:
        schema = {"enum": names}
    elif name == "version":
        schema = {"enum": ["1"]}
    return {"name": name, "in": "path", "required": True, "schema": schema}


def paths(
    names: list[str], secured: bool, public: frozenset[str] = PUBLIC_DEFAULT
) -> dict[str, Any]:
    """Each route of the table, as the document describes it (the deepstack catch-all, which
    only answers 404 or 405, is described with its one method that clients call: POST)."""
    document: dict[str, Any] = {}
    for route in routes.ROUTES:
        method = "post" if route.method == "*" else route.method.lower()
        path = route.path.replace("{unserved:.*}", "{unserved}")
        document.setdefault(path, {})[method] = _operation(route, names, secured, public)
    return document


def build(
    names: list[str],
    secured: bool,
    embedding_models: tuple[str, ...] = (),
    dimensions: int | None = None,
    public: frozenset[str] = PUBLIC_DEFAULT,
) -> dict[str, Any]:
    """The document of a server serving ``names`` (and, when it embeds, these embedding
    models of that many dimensions: the only values its embeddings route takes)."""
    schemas = copy.deepcopy(SCHEMAS)
    asked = schemas["EmbeddingsRequest"]["properties"]
    if embedding_models:  # null: as if not given
        asked["model"] = {"enum": [*embedding_models, None]}
    if dimensions is not None:
        asked["dimensions"] = {"enum": [dimensions, None]}
    document: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {
            "title": "npuctl serve",
            "version": __version__,
            "description": "Inference on the board's NPU: OpenAI embeddings, DeepStack vision, "
            "the open inference protocol (KServe v2) and Immich's machine learning.",
        },
        "paths": paths(names, secured, public),
        "components": {"schemas": schemas},
    }
    if secured:
        document["components"]["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
        document["security"] = [{"bearer": []}]
    return document


def document(service: Service) -> bytes:
    embedder = service.embedder
    return json.dumps(
        build(
            list(service.serving.models),
            service.key is not None,
            service.model_names,
            embedder.dimensions if embedder else None,
            service.public,
        )
    ).encode()
