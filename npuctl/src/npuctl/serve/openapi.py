"""/openapi.json: every route the server answers, described in OpenAPI 3.1 from the same data
the routes use (the served models, the public paths), so the document cannot drift from the
server; the tests check it against the routes and against recorded answers."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from .. import __version__

if TYPE_CHECKING:
    from .http import Service

_JSON = "application/json"


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _answer(description: str, schema: str | None = None, kind: str = _JSON) -> dict[str, Any]:
    answer: dict[str, Any] = {"description": description}
    if schema is not None:
        answer["content"] = {kind: {"schema": _ref(schema)}}
    return answer


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
                    {"type": "string"},
                    {"type": "array", "items": {"type": "string"}},
                    {"type": "array", "items": {"type": "integer"}},
                    {"type": "array", "items": {"type": "array", "items": {"type": "integer"}}},
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
            "min_confidence": {"type": "number", "minimum": 0, "maximum": 1, "default": 0.4},
            "top_k": {"type": "integer", "minimum": 1, "default": 5},
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
            "inputs": {"type": "array", "items": _ref("V2Tensor")},
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
    "V2Error": {
        "type": "object",
        "required": ["error"],
        "properties": {"error": {"type": "string"}},
    },
}

_TIMED = {
    "headers": {
        "Server-Timing": {
            "description": "Where the request's time went, in milliseconds (W3C Server-Timing): "
            "preprocess, queue, npu, postprocess, total; a vision answer adds decode and cpu "
            "(the CPU time of the request's own thread apart from the decode).",
            "schema": {"type": "string"},
        }
    }
}

_BUSY = {
    "429": _answer("The NPU's queue is full; Retry-After says when to try again."),
    "503": _answer("Loading, shutting down, past the deadline, or the NPU failed."),
}


def _vision(summary: str, schema: str) -> dict[str, Any]:
    return {
        "post": {
            "summary": summary,
            "requestBody": {
                "required": True,
                "content": {"multipart/form-data": {"schema": _ref("VisionForm")}},
            },
            "responses": {
                "200": {**_answer("Found.", schema), **_TIMED},
                "400": _answer(
                    "Not a form, no image, not an image, too many pixels.", "VisionError"
                ),
                "401": _answer("A missing or wrong api_key.", "VisionError"),
                "404": _answer("No model of this task is served.", "VisionError"),
                **_BUSY,
            },
        }
    }


def paths(names: list[str]) -> dict[str, Any]:
    model = {
        "name": "name",
        "in": "path",
        "required": True,
        "schema": {"enum": names} if names else {"type": "string"},
    }
    v2_errors = {"404": _answer("No such model.", "V2Error")}
    return {
        "/health": {
            "get": {
                "summary": "The process answers.",
                "responses": {"200": _answer("Alive.", "Health")},
            }
        },
        "/ready": {
            "get": {
                "summary": "Every model's golden input gives its start-up answer.",
                "responses": {
                    "200": _answer("Ready.", "Health"),
                    "503": _answer("Not ready.", "Health"),
                },
            }
        },
        "/metrics": {
            "get": {
                "summary": "Prometheus metrics, per model and per stage.",
                "responses": {"200": {"description": "Metrics.", "content": {"text/plain": {}}}},
            }
        },
        "/openapi.json": {
            "get": {
                "summary": "This document.",
                "responses": {"200": {"description": "OpenAPI 3.1."}},
            }
        },
        "/v1/models": {
            "get": {
                "summary": "The embedding models (OpenAI).",
                "responses": {"200": _answer("Models.", "ModelList")},
            }
        },
        "/v1/models/{model}": {
            "get": {
                "summary": "One embedding model (OpenAI).",
                "parameters": [
                    {"name": "model", "in": "path", "required": True, "schema": {"type": "string"}}
                ],
                "responses": {
                    "200": _answer("The model.", "Model"),
                    "404": _answer("No such model.", "OpenAIError"),
                },
            }
        },
        "/v1/embeddings": {
            "post": {
                "summary": "Embeddings of texts and images (OpenAI).",
                "requestBody": {
                    "required": True,
                    "content": {_JSON: {"schema": _ref("EmbeddingsRequest")}},
                },
                "responses": {
                    "200": _answer("The vectors.", "Embeddings"),
                    "400": _answer("Invalid input.", "OpenAIError"),
                    "401": _answer("A missing or wrong API key.", "OpenAIError"),
                    "404": _answer("No embedding model is served.", "OpenAIError"),
                    **_BUSY,
                },
            }
        },
        "/v1/vision/detection": _vision(
            "Objects in an image (DeepStack / CodeProject.AI).", "Detections"
        ),
        "/v1/vision/classification": _vision("The classes of an image, best first.", "Classes"),
        "/v2": {
            "get": {
                "summary": "Server metadata (KServe v2).",
                "responses": {"200": _answer("Metadata.", "V2Server")},
            }
        },
        "/v2/health/live": {
            "get": {"summary": "Live (KServe v2).", "responses": {"200": {"description": "Live."}}}
        },
        "/v2/health/ready": {
            "get": {
                "summary": "Ready (KServe v2).",
                "responses": {
                    "200": {"description": "Ready."},
                    "503": {"description": "Not ready."},
                },
            }
        },
        "/v2/models/{name}": {
            "get": {
                "summary": "A model's tensors (KServe v2).",
                "parameters": [model],
                "responses": {"200": _answer("Metadata.", "V2Model"), **v2_errors},
            }
        },
        "/v2/models/{name}/ready": {
            "get": {
                "summary": "A model is ready (KServe v2).",
                "parameters": [model],
                "responses": {
                    "200": {"description": "Ready."},
                    "503": {"description": "Not ready."},
                    **v2_errors,
                },
            }
        },
        "/v2/models/{name}/infer": {
            "post": {
                "summary": "Raw tensors in and out (KServe v2; JSON or the binary-data extension).",
                "parameters": [model],
                "requestBody": {
                    "required": True,
                    "content": {
                        _JSON: {"schema": _ref("V2InferRequest")},
                        "application/octet-stream": {
                            "description": "Inference-Header-Content-Length bytes of JSON, "
                            "then the tensors"
                        },
                    },
                },
                "responses": {
                    "200": {**_answer("The outputs.", "V2InferResponse"), **_TIMED},
                    "400": _answer("A tensor of the wrong name, shape or datatype.", "V2Error"),
                    "401": _answer("A missing or wrong API key.", "V2Error"),
                    **v2_errors,
                    **_BUSY,
                },
            }
        },
    }


def build(names: list[str], secured: bool) -> dict[str, Any]:
    document: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {
            "title": "npuctl serve",
            "version": __version__,
            "description": "Inference on the board's NPU: OpenAI embeddings, DeepStack vision, "
            "and the open inference protocol (KServe v2).",
        },
        "paths": paths(names),
        "components": {"schemas": SCHEMAS},
    }
    if secured:
        document["components"]["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
        document["security"] = [{"bearer": []}]
    return document


def document(service: Service) -> bytes:
    return json.dumps(build(list(service.serving.models), service.key is not None)).encode()
