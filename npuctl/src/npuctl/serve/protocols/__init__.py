"""The route table: every protocol npuctl serve speaks, each one module of this package. Over
HTTP, its routes, parsing, error shape and OpenAPI, in the order their routes are matched;
over anything else, its listener and options. A new protocol is its module and one line
here."""

from __future__ import annotations

from ..protocol import HttpApi, Listener
from . import deepstack, frigate, health, immich, kserve, llamacpp, openai

HTTP: tuple[HttpApi, ...] = (
    health.API,
    openai.API,
    deepstack.API,
    kserve.API,
    immich.API,
    llamacpp.API,
)
LISTENERS: tuple[Listener, ...] = (frigate.LISTENER,)
