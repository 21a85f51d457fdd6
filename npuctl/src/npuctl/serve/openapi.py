"""/openapi.json: every route the server answers, described in OpenAPI 3.1 from the same data
the routes are made of (each protocol's routes and schemas, the served models, the public
groups and the limits), so the document cannot drift from the server; the tests check it
against the routes, against recorded answers and against the live server."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from .. import __version__
from .protocol import SERVER_ERROR_SCHEMA, HttpApi, Route

if TYPE_CHECKING:
    from .service import Service

_JSON = "application/json"

SERVER_ERROR: dict[str, Any] = {
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
}
_TIMED = {
    "Server-Timing": {
        "description": "Where the request's time went, in milliseconds (W3C Server-Timing): "
        "preprocess, queue, npu, postprocess, total; a vision answer adds decode and cpu "
        "(the CPU time of the request's own threads apart from the decode).",
        "schema": {"type": "string"},
    }
}
_RETRY = {"Retry-After": {"description": "Seconds to wait.", "schema": {"type": "string"}}}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _answer(description: str, schema: str | None = None, kind: str = _JSON) -> dict[str, Any]:
    answer: dict[str, Any] = {"description": description}
    if schema is not None:
        answer["content"] = {kind: {"schema": _ref(schema)}}
    return answer


def _operation(
    api: HttpApi, route: Route, names: list[str], secured: bool, public: frozenset[str]
) -> dict[str, Any]:
    error = api.error_schema
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


def documented_path(route: Route) -> str:
    """A route's path as the document names it ({name:regex} as {name})."""
    return "/".join(
        f"{{{part[1:-1].split(':')[0]}}}" if part.startswith("{") else part
        for part in route.path.split("/")
    )


def paths(
    apis: tuple[HttpApi, ...], names: list[str], secured: bool, public: frozenset[str]
) -> dict[str, Any]:
    """Each route, as the document describes it (a catch-all of any method, which only
    answers 404 or 405, is described with its one method that clients call: POST)."""
    document: dict[str, Any] = {}
    for api in apis:
        for route in api.routes:
            method = "post" if route.method == "*" else route.method.lower()
            operation = _operation(api, route, names, secured, public)
            document.setdefault(documented_path(route), {})[method] = operation
    return document


def build(apis: tuple[HttpApi, ...], service: Service) -> dict[str, Any]:
    """The document of this server: the protocols it speaks, the models it serves, its key,
    its public groups and its limits."""
    schemas: dict[str, Any] = {SERVER_ERROR_SCHEMA: SERVER_ERROR}
    for api in apis:
        schemas.update(api.schemas(service))
    names, secured = list(service.serving.models), service.key is not None
    document: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {
            "title": "npuctl serve",
            "version": __version__,
            "description": "Inference on the board's NPU: "
            + ", ".join(api.name for api in apis)
            + ".",
        },
        "paths": paths(apis, names, secured, service.public),
        "components": {"schemas": schemas},
    }
    if secured:
        document["components"]["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
        document["security"] = [{"bearer": []}]
    return document


def document(apis: tuple[HttpApi, ...], service: Service) -> bytes:
    return json.dumps(build(apis, service)).encode()
