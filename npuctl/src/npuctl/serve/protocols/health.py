"""The server's own routes: /health (the process answers and the NPU is not hung), /ready
(every model's golden input gives its start-up answer), /metrics (Prometheus) and
/openapi.json (this server's document)."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from .. import openapi
from ..metrics import CONTENT_TYPE
from ..protocol import (
    SERVER_ERROR_SCHEMA,
    Call,
    HttpApi,
    Route,
    json_response,
    server_error_body,
)
from ..service import Service


def _dumps(document: object) -> bytes:
    return json.dumps(document, separators=(",", ":")).encode()


async def health(call: Call) -> web.Response:
    ok, reason = call.service.healthy()
    return json_response(
        _dumps({"status": "ok"} if ok else {"status": "unhealthy", "reason": reason}),
        200 if ok else 503,
    )


async def ready(call: Call) -> web.Response:
    ok, reason = await call.service.ready()
    return json_response(
        _dumps({"status": "ready" if ok else "unavailable", "reason": reason}), 200 if ok else 503
    )


async def metrics(call: Call) -> web.Response:
    response = web.Response(body=call.service.metrics.render())
    response.headers["Content-Type"] = CONTENT_TYPE
    return response


async def document(call: Call) -> web.Response:
    return json_response(openapi.document(call.apis, call.service))


def schemas(service: Service) -> dict[str, Any]:
    return {
        "Health": {
            "type": "object",
            "required": ["status"],
            "properties": {"status": {"type": "string"}, "reason": {"type": "string"}},
        },
    }


API = HttpApi(
    "server",
    (
        Route(
            "GET",
            "/health",
            health,
            "The process answers and the NPU is not hung.",
            public="health",
            responses={"200": ("Alive.", "Health"), "503": ("An NPU call hung.", "Health")},
        ),
        Route(
            "GET",
            "/ready",
            ready,
            "Every model's golden input gives its start-up answer.",
            public="health",
            responses={"200": ("Ready.", "Health"), "503": ("Not ready.", "Health")},
        ),
        Route(
            "GET",
            "/metrics",
            metrics,
            "Prometheus metrics, per model and per stage.",
            public="metrics",
            responses={"200": ("Metrics (Prometheus text).", None)},
        ),
        Route(
            "GET",
            "/openapi.json",
            document,
            "This document.",
            public="openapi",
            responses={"200": ("OpenAPI 3.1.", None)},
        ),
    ),
    server_error_body,
    SERVER_ERROR_SCHEMA,
    schemas,
)
