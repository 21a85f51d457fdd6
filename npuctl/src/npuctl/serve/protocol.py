"""What an HTTP protocol of npuctl serve is: its routes (each with its handler, a function),
its error shape and the paths it claims, and its OpenAPI schemas; and what every handler is
given: the request, its route, the shared service, and the ways a body is read (held to the
route's limits while it arrives). Each protocol is one module of .protocols; the HTTP layer
(.http) and the OpenAPI document (.openapi) are made from them."""

from __future__ import annotations

import asyncio
import functools
import json
import re
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from aiohttp import BodyPartReader, web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestPayloadError

from . import auth
from .errors import ApiError
from .memory import JSON_EXPANSION, UNDECLARED_FIRST, Held

if TYPE_CHECKING:
    from ..models.manifest import FrigateFacts
    from .models import ServedModel
    from .service import Service

# What bounds a body: the text limit (--max-body) or the upload limit (--max-upload).
TEXT, UPLOAD = "text", "upload"
JSON, FORM, BINARY = "application/json", "multipart/form-data", "application/octet-stream"
URLENCODED = "application/x-www-form-urlencoded"
# Bodies up to this size are prepared on the event loop (tokenizing a few texts takes
# microseconds, less than a hand-over to a request thread); larger ones on a request thread.
PREPARE_INLINE = 16 * 1024
# The Content-Disposition every client here sends (requests, curl, Node's FormData): its
# name read directly. aiohttp's parser (about 30 us a header, most of a small form's cost)
# reads every other one.
_PLAIN_DISPOSITION = re.compile(r'form-data; name="([\w.\-]+)"(?:; filename="[^"\\%]*")?')


# The OpenAPI schema of server_error_body's documents.
SERVER_ERROR_SCHEMA = "OpenAIError"


def server_error_body(error: ApiError) -> bytes:
    """OpenAI's error shape, which is also the server's own: its health routes, the paths no
    protocol claims, and a connection refused before its request was read."""
    error_type = "invalid_request_error" if error.status < 500 else "server_error"
    if error.status == 429:
        error_type = "rate_limit_error"
    document = {
        "error": {
            "message": str(error),
            "type": error_type,
            "param": error.param,
            "code": error.code,
        }
    }
    return json.dumps(document).encode()


Handler = Callable[["Call"], Awaitable[web.StreamResponse]]
Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]


@dataclass(frozen=True)
class Route:
    method: str  # GET (HEAD too), POST, or * (any)
    path: str  # aiohttp's pattern: {name} is a path parameter
    handler: Handler
    summary: str
    public: str | None = None  # the --public group that opens it without the key
    body: str | None = None  # the limit its body is held to (TEXT, UPLOAD); None: no body
    request: dict[str, str | None] = field(default_factory=dict)  # media type -> schema
    responses: dict[str, tuple[str, str | None]] = field(default_factory=dict)  # status ->
    # (description, schema); 401, 408, 411, 413, 429, 503 and 504 follow from its other facts
    inference: bool = False  # reaches the NPU: waits for the models, 429 and 503/504 may answer
    timed: bool = False  # answers carry Server-Timing
    key_in_form: bool = False  # the key may come as the form field api_key (DeepStack)
    parsed: bool = False  # its body is JSON: held in memory as parsing makes it (JSON_EXPANSION)


def _no_schemas(service: Service) -> Mapping[str, Any]:
    return {}


@dataclass(frozen=True)
class HttpApi:
    """One protocol: its routes, how its errors look, and its OpenAPI components."""

    name: str
    routes: tuple[Route, ...]
    error_body: Callable[[ApiError], bytes]
    error_schema: str  # the OpenAPI schema of error_body's documents
    # Its OpenAPI components, as this server takes them (its limits as their bounds, its
    # models' names).
    schemas: Callable[[Service], Mapping[str, Any]] = _no_schemas
    # The paths no route matched that still answer in this protocol's shape: a path, or
    # every path under one ending in "/" (the longest that fits decides).
    namespace: tuple[str, ...] = ()
    # Its own options of 'npuctl serve' (the service gives their values: Service.options).
    options: tuple[Decorator, ...] = ()

    def claim(self, path: str) -> int:
        """How closely ``path`` is this protocol's (0: not at all)."""
        return max(
            (
                len(name)
                for name in self.namespace
                if path == name or (name.endswith("/") and path.startswith(name))
            ),
            default=0,
        )


class Running(Protocol):
    """A protocol's listeners, while the server runs."""

    def where(self) -> str:
        """Where it listens, for the log."""
        ...

    async def close(self) -> None:
        """No new peers; the ones in flight end."""
        ...


@dataclass(frozen=True)
class Startup:
    """What a listening protocol is given at start: the service, the command's options (its
    own among them), and the family's way to take an uploaded model (None when it has none)."""

    service: Service
    options: Mapping[str, Any]
    upload: Callable[[str, Path], tuple[ServedModel, FrigateFacts]] | None


@dataclass(frozen=True)
class Listener:
    """A protocol that is not HTTP: its own options, and what starts its listeners (nothing
    when its options do not ask for it)."""

    name: str
    options: tuple[Decorator, ...]
    start: Callable[[Startup], Awaitable[Running | None]]


@dataclass
class Call:
    """One request to a route: what its handler needs beside the request itself."""

    request: web.Request
    route: Route
    service: Service
    threads: Executor
    apis: tuple[HttpApi, ...]  # every protocol the server speaks over HTTP
    hold: Held | None = None  # its share of the body budget, while its route's handler runs

    # -- who may call ----------------------------------------------------------------------
    @property
    def keyed(self) -> bool:
        """Whether this route asks for the key."""
        service = self.service
        return service.key is not None and self.route.public not in service.public

    def authorize(self, form_key: bytes | None = None) -> None:
        """The key from the Authorization header or, where the route takes it there, the form
        field api_key (an empty field never outweighs a valid header)."""
        if self.keyed and not self.service.authorized(form_key, auth.bearer(self.request.headers)):
            raise unauthorized()

    # -- bodies ----------------------------------------------------------------------------
    @property
    def body_limit(self) -> int:
        limits = self.service.limits
        return limits.max_upload if self.route.body == UPLOAD else limits.max_body

    def too_large(self, size: int) -> ApiError:
        flag = "--max-upload" if self.route.body == UPLOAD else "--max-body"
        return ApiError(
            413,
            f"the body is {size:,} bytes, over this route's limit of {self.body_limit:,} (split "
            f"the request, or raise {flag})",
            "request_too_large",
            kind="too_large",
        )

    def held_in_memory(self, size: int | None = None) -> int:
        """What reading (and parsing) ``size`` bytes of this body may hold; by default, what
        it holds before any arrive: its declared size, or UNDECLARED_FIRST where it says none
        (chunked or compressed: it grows as the body arrives, up to the route's limit)."""
        if size is None:
            request = self.request
            encoding = request.headers.get("Content-Encoding", "identity").lower()
            size = request.content_length
            if size is None or encoding != "identity":
                size = UNDECLARED_FIRST
        size = min(size, self.body_limit)
        return size * JSON_EXPANSION if self.route.parsed else size

    def _arrived(self, size: int) -> None:
        """``size`` bytes of the body are here: over the route's limit, 413; the hold grows to
        them (MemoryBusy, a 503, when the budget has no room left)."""
        if size > self.body_limit:
            raise self.too_large(size)
        if self.hold is not None:
            self.hold.grow(self.held_in_memory(size))

    async def body(self) -> bytes:
        """The whole body, held to the route's limit and the body timeout, charged to the
        body budget as it arrives."""
        timeout = self.service.limits.body_timeout
        content = self.request.content
        chunks: list[bytes] = []
        size = 0
        try:
            async with asyncio.timeout(timeout):
                while chunk := await content.readany():
                    size += len(chunk)
                    self._arrived(size)
                    chunks.append(chunk)
        except TimeoutError:
            raise too_slow(timeout) from None
        except RequestPayloadError:  # compressed or chunked framing that is not
            raise not_well_formed() from None
        except ConnectionResetError:
            raise went_away() from None
        return b"".join(chunks)

    async def form(self) -> dict[str, bytes]:
        """The form's fields by name (the first of repeated names), files as their bytes."""
        request = self.request
        media = request.content_type
        if media not in (FORM, URLENCODED):
            raise ApiError(
                400,
                f"the body is {media or 'of no type'}, not a form: send multipart/form-data "
                "with the image in the field 'image'",
                "invalid_request",
            )
        timeout = self.service.limits.body_timeout
        try:
            async with asyncio.timeout(timeout):
                if media == FORM:
                    return await self._parts()
                form = await request.post()  # urlencoded: held to client_max_size
        except TimeoutError:
            raise too_slow(timeout) from None
        except RequestPayloadError:
            raise not_well_formed() from None
        except ConnectionResetError:
            raise went_away() from None
        except (
            ValueError,
            AssertionError,
            LookupError,
            UnicodeDecodeError,
            HttpProcessingError,  # a part's head that is no HTTP header
        ) as error:
            message = str(error).replace("\n", " ")
            raise ApiError(
                400, f"the form is not well formed ({message})"[:300], "invalid_request"
            ) from None
        fields: dict[str, bytes] = {}
        for name, value in form.items():  # urlencoded: text only (files come in _parts)
            if isinstance(value, str):
                fields.setdefault(name, value.encode())
        return fields

    async def _parts(self) -> dict[str, bytes]:
        """A multipart form read into memory part by part, held to the upload limit as it
        arrives (aiohttp's own reading would spool files to a temporary file, which a
        read-only container has no room for)."""
        most = self.service.limits.max_form_parts
        fields: dict[str, bytes] = {}
        total = 0
        reader = await self.request.multipart()
        for _ in range(most + 1):
            part = await reader.next()
            if part is None:
                return fields
            if not isinstance(part, BodyPartReader):
                raise ApiError(400, "a form part holds another form", "invalid_request")
            chunks = []
            while chunk := await part.read_chunk(65536):
                total += len(chunk)
                self._arrived(total)
                chunks.append(chunk)
            name = part_name(part)
            if name is not None:
                fields.setdefault(name, b"".join(chunks))
        raise ApiError(400, f"the form has more than {most} parts", "invalid_request")

    # -- work ------------------------------------------------------------------------------
    async def blocking(self, function: Callable[..., Any], *args: Any) -> Any:
        """``function(*args)`` on a request thread: decoding, parsing large bodies and post-
        processing, which would hold the event loop."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.threads, functools.partial(function, *args))


def part_name(part: BodyPartReader) -> str | None:
    """The name of a form's part, as aiohttp's BodyPartReader.name gives it."""
    plain = _PLAIN_DISPOSITION.fullmatch(part.headers.get("Content-Disposition", ""))
    return plain.group(1) if plain else part.name


def json_response(
    body: bytes, status: int = 200, headers: Mapping[str, str] | None = None
) -> web.Response:
    return web.Response(body=body, status=status, content_type=JSON, headers=headers)


def unauthorized() -> ApiError:
    return ApiError(
        401,
        "a valid API key is required: send 'Authorization: Bearer KEY' (or the form field api_key)",
        "invalid_api_key",
        kind="unauthorized",
        headers={"WWW-Authenticate": "Bearer"},
    )


def not_well_formed() -> ApiError:
    return ApiError(
        400,
        "the body does not decode: its Content-Encoding or its chunked framing is broken, or "
        "it ended before its Content-Length",
        "invalid_request",
    )


def went_away() -> ApiError:
    """The peer closed its connection inside the body: nobody is left to answer, and it is
    not the server's failure."""
    return ApiError(
        400, "the connection closed before the body was whole", "invalid_request", kind="cancelled"
    )


def too_slow(seconds: float) -> ApiError:
    return ApiError(
        408,
        f"the body took over {seconds:g} s to arrive",
        "request_timeout",
        kind="slow_client",
        headers={"Connection": "close"},
    )


def not_found(what: str) -> ApiError:
    return ApiError(404, what, "model_not_found", kind="model_not_found")
