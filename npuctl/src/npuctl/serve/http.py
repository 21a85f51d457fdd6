"""The HTTP side of npuctl serve, on aiohttp (which parses, frames, decompresses and reads
forms): the routes of every protocol of .protocols, and the layers every request passes
through once, in this order: the connection guard's refusal, draining, the key (from the
header, before any body is read), the body's declared size and encoding, the models (an
inference waits while they load), the memory its body may hold, then the route's handler;
every failure answered in the shape of the route's protocol (or of the protocol that claims
the path, when no route matched)."""

from __future__ import annotations

import asyncio
import functools
import logging
import re
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from aiohttp import web, web_response

from ..errors import ExitCode, NpuctlError
from . import affinity
from .connections import Budget, Guard, remove_stale_socket
from .errors import ApiError
from .memory import MemoryBusy
from .protocol import Call, HttpApi, Route
from .service import Service

log = logging.getLogger("npuctl.serve")

JSON = "application/json"
ENCODINGS = ("identity", "gzip", "deflate")  # request bodies aiohttp decompresses for us
Answer = Callable[[web.Request], Awaitable[web.StreamResponse]]
SERVER = "npuctl-serve"
# aiohttp names itself and Python's version in every answer no handler wrote (its own 400s for
# a head it cannot parse, the refusals of Expect): the default it takes for them, ours.
web_response.SERVER_SOFTWARE = SERVER


class HttpServer:
    """The application of every HTTP protocol, over the shared service."""

    def __init__(self, service: Service, apis: tuple[HttpApi, ...]) -> None:
        self.service = service
        self.apis = apis
        self.guards: dict[Any, Guard] = {}
        # Threads for the blocking work: one per request in flight, as many as connections.
        self.threads = ThreadPoolExecutor(
            max_workers=2 * service.limits.max_connections,
            thread_name_prefix="request",
            initializer=affinity.wait_for_the_holder,
        )

    # -- the application ------------------------------------------------------------------
    def application(self) -> web.Application:
        limits = self.service.limits
        # No middleware: every answer passes through _answer, bound to its route, so a
        # request resumes through as few coroutines as possible.
        app = web.Application(client_max_size=max(limits.max_body, limits.max_upload))
        for api in self.apis:
            for route in api.routes:
                handler = functools.partial(self._answer, api, route)
                expect = functools.partial(self._expect, api, route)
                methods = ("GET", "HEAD") if route.method == "GET" else (route.method,)
                for method in methods:
                    app.router.add_route(method, route.path, handler, expect_handler=expect)
        # Checked last: a path no route serves, or a served path asked with another method,
        # answered in the shape of the protocol that claims the path (aiohttp's router
        # answers in plain text).
        app.router.add_route(
            "*", r"/{unmatched:[\s\S]*}", self._unmatched, expect_handler=self._refuse
        )
        return app

    def api_of(self, path: str) -> HttpApi:
        """The protocol whose shape a path that matched no route answers in: the one whose
        namespace fits it most closely, else the first (the server's own)."""
        return max(self.apis, key=lambda api: api.claim(path))

    async def _answer(self, api: HttpApi, route: Route, request: web.Request) -> web.StreamResponse:
        """Every answer of a route: in flight for draining, counted, through the layers, and
        each failure in its protocol's shape."""
        service = self.service
        started = time.perf_counter()
        guard = self.guards.get(request.transport)
        if guard is not None:
            guard.request_started()
            guard.handler = asyncio.current_task()
        service.begin()
        try:
            self._admitted(request, guard)
            _expectation_understood(request)
            call = Call(request, route, service, self.threads, self.apis)
            if not route.key_in_form:
                call.authorize()
            self._body_declared(call)
            response = await self._handled(call)
        except ApiError as error:
            response = self._error(api, error)
        except web.HTTPException as error:  # aiohttp's 413
            response = self._error(api, _from_http(error))
        except asyncio.CancelledError:
            # Its client left (the guard ends the request with the connection): nobody reads
            # an answer and it is no failure of the server's, but a request that failed all
            # the same, whether or not it had queued inputs yet.
            service.metrics.errors.labels("cancelled").inc()
            raise
        except Exception:  # a bug must cost one request, not the server
            log.exception("internal error answering %s %s", request.method, request.path[:200])
            response = self._error(
                api,
                ApiError(500, "internal error (see the service log)", "internal", kind="internal"),
            )
        finally:
            service.end()
            if guard is not None:
                guard.request_finished(request.content.is_eof())
        self._finish(request, response, guard)
        service.metrics.answered(route.path, response.status, time.perf_counter() - started)
        return response

    async def _handled(self, call: Call) -> web.StreamResponse:
        route, service = call.route, call.service
        if route.inference:
            await service.models_loaded()
        if route.body is None:
            return await route.handler(call)
        try:
            async with service.bodies.held(
                call.held_in_memory(), service.limits.body_timeout
            ) as call.hold:
                return await route.handler(call)
        except MemoryBusy:
            raise ApiError(
                503,
                "the server holds as many request bodies as its memory allows: retry later",
                "busy",
                kind="busy",
                headers={"Retry-After": "1"},
            ) from None

    async def _unmatched(self, request: web.Request) -> web.StreamResponse:
        """404 for a path that is not served, whatever the method; 405 (with Allow) for a
        served path asked with another method."""
        api = self.api_of(request.path)
        started = time.perf_counter()
        guard = self.guards.get(request.transport)
        if guard is not None:
            guard.request_started()
        try:
            self._admitted(request, guard)
            raise self._not_served(request)
        except ApiError as error:
            response = self._error(api, error)
        finally:
            if guard is not None:
                guard.request_finished(request.content.is_eof())
        self._finish(request, response, guard)
        self.service.metrics.answered("other", response.status, time.perf_counter() - started)
        return response

    def _admitted(self, request: web.Request, guard: Guard | None) -> None:
        """The guard's refusal of the connection, or the drain's of every request."""
        if guard is not None and guard.refusal is not None:
            refusal = guard.refusal
            retry = {"Retry-After": str(refusal.retry_after)} if refusal.retry_after else {}
            kind = "busy" if refusal.status == 503 else "invalid_request"
            raise ApiError(refusal.status, refusal.message, refusal.code, kind=kind, headers=retry)
        if self.service.draining.is_set():
            raise ApiError(
                503,
                "the server is shutting down: retry on another",
                "shutting_down",
                kind="shutting_down",
                headers={"Retry-After": "5"},
            )

    def _finish(
        self, request: web.Request, response: web.StreamResponse, guard: Guard | None
    ) -> None:
        expected = "Expect" in request.headers
        refused = guard is not None and guard.refusal is not None
        if refused or self.service.draining.is_set() or (expected and not request.content.is_eof()):
            # Refused, draining, or a refused body its client will never send (aiohttp 3.8
            # ignores an answer of the expect handler, so a refusal can come from here too).
            response.force_close()
            response.headers["Connection"] = "close"
        response.headers["Server"] = SERVER

    def _error(self, api: HttpApi, error: ApiError) -> web.Response:
        self.service.metrics.errors.labels(error.kind).inc()
        return web.Response(
            body=api.error_body(error),
            status=error.status,
            content_type=JSON,
            headers=error.headers,
        )

    def _not_served(self, request: web.Request) -> ApiError:
        allowed = self.methods_at(request.path)
        if not allowed:
            return ApiError(
                404, f"no such endpoint: {request.path[:200]}", "not_found", kind="not_found"
            )
        return ApiError(
            405,
            f"{request.method} is not served here: use {','.join(allowed)}",
            "method_not_allowed",
            kind="invalid_request",
            headers={"Allow": ",".join(allowed)},
        )

    def methods_at(self, path: str) -> list[str]:
        """The methods the routes serve at ``path``, as a 405's Allow lists them."""
        methods: set[str] = set()
        for route, pattern in self._patterns:
            if pattern.fullmatch(path):
                methods.update(("GET", "HEAD") if route.method == "GET" else (route.method,))
        return sorted(methods)

    @functools.cached_property
    def _patterns(self) -> list[tuple[Route, re.Pattern[str]]]:
        """Each route's path as a regular expression: {name} one segment, {name:regex} the
        regex."""
        compiled = []
        for api in self.apis:
            for route in api.routes:
                parts = re.split(r"\{\w+(?::([^}]*))?\}", route.path)
                # re.split gives literal, group, literal, group, ...: literals escaped.
                pattern = "".join(
                    re.escape(part) if index % 2 == 0 else f"(?:{part or '[^/]+'})"
                    for index, part in enumerate(parts)
                )
                compiled.append((route, re.compile(pattern)))
        return compiled

    # -- what a request must be before its body is read ----------------------------------
    def _body_declared(self, call: Call) -> None:
        if call.route.body is None:
            return
        request = call.request
        if request.content_length is not None and request.content_length > call.body_limit:
            raise call.too_large(request.content_length)
        chunked = "chunked" in request.headers.get("Transfer-Encoding", "").lower()
        if request.method == "POST" and request.content_length is None and not chunked:
            raise ApiError(
                411, "a Content-Length header (or a chunked body) is required", "length_required"
            )
        encoding = request.headers.get("Content-Encoding", "identity").strip().lower()
        if encoding not in ENCODINGS:
            raise ApiError(
                415,
                f"Content-Encoding {encoding[:40]!r} is not read here: send gzip, deflate or none",
                "unsupported_media_type",
            )

    async def _expect(
        self, api: HttpApi, route: Route, request: web.Request
    ) -> web.StreamResponse | None:
        """Expect: 100-continue (curl sends it above 1 MiB): a body that would be refused is
        refused before the client sends it, in the route's shape."""
        call = Call(request, route, self.service, self.threads, self.apis)
        try:
            _expectation_understood(request)
            self._admitted(request, self.guards.get(request.transport))
            if not route.key_in_form:
                call.authorize()
            self._body_declared(call)
        except ApiError as error:
            response = self._error(api, error)
            # The body never comes: nothing is left to read (aiohttp 3.8 writes no header
            # for force_close here, so it is said too).
            response.force_close()
            response.headers["Connection"] = "close"
            self.service.metrics.answered(route.path, error.status, 0.0)
            return response
        if request.version >= (1, 1):
            await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        return None

    async def _refuse(self, request: web.Request) -> web.StreamResponse:
        """Expect: 100-continue on a path that is not served: refused before the body."""
        response = self._error(self.api_of(request.path), self._not_served(request))
        response.force_close()
        response.headers["Connection"] = "close"
        self.service.metrics.answered("other", response.status, 0.0)
        return response

    # -- listening ------------------------------------------------------------------------
    async def listen(
        self,
        runner: web.AppRunner,
        address: tuple[str, int] | None,
        socket_path: Path | None,
    ) -> list[asyncio.AbstractServer]:
        """The TCP listener and the unix socket, each with connections of its own."""
        loop = asyncio.get_running_loop()
        limits, metrics, guards = self.service.limits, self.service.metrics, self.guards
        protocols = runner.server
        if protocols is None:
            raise RuntimeError("the runner serves nothing before its setup")

        def guarded(budget: Budget) -> Callable[[], Guard]:
            return lambda: Guard(protocols(), budget, limits, metrics, guards)

        servers: list[asyncio.AbstractServer] = []
        try:
            if address is not None:
                budget = Budget(limits.max_connections, limits.max_per_client)
                servers.append(
                    await loop.create_server(
                        guarded(budget), address[0], address[1], reuse_address=True, backlog=128
                    )
                )
            if socket_path is not None:
                socket_path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
                remove_stale_socket(socket_path)
                budget = Budget(limits.max_connections, limits.max_connections)
                servers.append(await loop.create_unix_server(guarded(budget), str(socket_path)))
                # Anyone who may reach 127.0.0.1 may use the socket too; the folder decides.
                socket_path.chmod(0o666)
        except OSError as error:
            for listening in servers:
                listening.close()
            await runner.cleanup()
            where = f"{address[0]}:{address[1]}" if address and not servers else str(socket_path)
            raise NpuctlError(
                f"cannot listen on {where}: {error.strerror or error} (stop the other server, "
                "or choose another --port / --unix-socket)",
                ExitCode.SERVICE,
            ) from None
        return servers


def _from_http(error: web.HTTPException) -> ApiError:
    """aiohttp's own refusals (a body over the size limit) as this server's errors."""
    if error.status == 413:
        return ApiError(413, str(error.text or error.reason), "request_too_large", kind="too_large")
    return ApiError(error.status, error.reason, "invalid_request")


def _expectation_understood(request: web.Request) -> None:
    """RFC 9110: an Expect other than 100-continue is refused with 417 before the body (the
    expect handler says so; aiohttp 3.8 ignores its answer, so the route says it again)."""
    expectation = request.headers.get("Expect")
    if expectation is not None and expectation.strip().lower() != "100-continue":
        raise ApiError(417, "only Expect: 100-continue is understood", "expectation_failed")
