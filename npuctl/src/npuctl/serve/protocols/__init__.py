"""The route table: every protocol npuctl serve speaks over HTTP, each one module of this
package (its routes, parsing, error shape and OpenAPI), in the order their routes are matched.
A new protocol is its module and one line here."""

from __future__ import annotations

from ..protocol import HttpApi
from . import deepstack, health, immich, kserve, openai

HTTP: tuple[HttpApi, ...] = (health.API, openai.API, deepstack.API, kserve.API, immich.API)
