"""The HTTP side of npuctl serve, on aiohttp (which parses, frames, decompresses and reads
forms): the routes of .routes, each error in its own API's shape, the key checked before a
body is parsed where the key can be elsewhere, every body held to its route's limit and
timeout, and the work itself on the server's request threads (an NPU call blocks)."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from aiohttp import BodyPartReader, web
from aiohttp.http_exceptions import HttpProcessingError

from .. import __version__
from . import affinity, api, auth, immich, kserve, openapi, routes, vision_api
from .connections import Guard
from .metrics import CONTENT_TYPE
from .models import CLASSIFICATION, DETECTION, ServedModel
from .owner import Work
from .routes import DEEPSTACK, IMMICH, UPLOAD, V2, Route
from .service import ClientGone, Service, unauthorized

log = logging.getLogger("npuctl.serve")

JSON = "application/json"
# Text bodies up to this size are prepared on the event loop (tokenizing a few texts takes
# microseconds); larger ones, and any with images, on a request thread.
INLINE_BODY = 16 * 1024
MAX_PARTS = 32  # fields of one form; DeepStack's have at most three
# The Content-Disposition every client here sends (requests, curl, Node's FormData): its
# name read directly. aiohttp's parser (about 30 us a header, most of a small form's cost)
# reads every other one.
_PLAIN_DISPOSITION = re.compile(r'form-data; name="([\w.\-]+)"(?:; filename="[^"\\%]*")?')
ENCODINGS = ("identity", "gzip", "deflate")  # request bodies aiohttp decompresses for us
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def error_body(shape: str, error: api.ApiError) -> bytes:
    """The error as the client of that API parses it."""
    if shape == DEEPSTACK:
        return vision_api.error_body(error.status, str(error))
    if shape == V2:
        return json.dumps({"error": str(error)}).encode()
    if shape == IMMICH:
        return immich.error_body(error)
    return error.body()


def _json(document: object, status: int = 200) -> web.Response:
    body = json.dumps(document, separators=(",", ":")).encode()
    return web.Response(body=body, status=status, content_type=JSON)


class Api:
    """The routes' coroutines; what they share is the Service."""

    def __init__(self, service: Service, guards: Mapping[Any, Guard]) -> None:
        self.service = service
        self.guards = guards
        limits = service.limits
        # Threads for the blocking work: one per request in flight, as many as connections.
        self.threads = ThreadPoolExecutor(
            max_workers=2 * limits.max_connections,
            thread_name_prefix="request",
            initializer=affinity.wait_for_the_holder,
        )
        # Each get_running_loop() asks the kernel for the process id: once is enough.
        self.loop = asyncio.get_running_loop()

    # -- the application ------------------------------------------------------------------
    def application(self) -> web.Application:
        limits = self.service.limits
        # No middleware: every answer passes through _answer, bound to its route, so a
        # request resumes through as few coroutines as possible.
        app = web.Application(client_max_size=max(limits.max_body, limits.max_upload))
        for route in routes.ROUTES:
            handler = self._bound(route, getattr(self, route.handler))
            expect = functools.partial(self._expect, route)
            methods = ("GET", "HEAD") if route.method == "GET" else (route.method,)
            for method in methods:
                app.router.add_route(method, route.path, handler, expect_handler=expect)
        # Checked last: a path no route serves, or a served path asked with another method,
        # answered in that path's API shape (aiohttp's router answers in plain text).
        app.router.add_route(
            "*",
            r"/{unmatched:[\s\S]*}",
            self._bound(None, self._unmatched),
            expect_handler=self._refuse,
        )
        return app

    def _bound(self, route: Route | None, handler: Handler) -> Handler:
        bound = functools.partial(self._answer, route, handler)
        bound.route = route  # type: ignore[attr-defined]
        return bound

    async def _answer(
        self, route: Route | None, handler: Handler, request: web.Request
    ) -> web.StreamResponse:
        """Every answer: in flight for draining, counted, and each failure in its API's shape."""
        service = self.service
        started = time.perf_counter()
        shape = route.api if route else routes.api_of(request.path)
        guard = self.guards.get(request.transport)
        if guard is not None:
            guard.request_started()
            guard.handler = asyncio.current_task(self.loop)
        service.begin()
        try:
            if service.draining.is_set():
                raise api.ApiError(
                    503,
                    "the server is shutting down: retry on another",
                    "shutting_down",
                    kind="shutting_down",
                    headers={"Retry-After": "5"},
                )
            if route is not None:
                self._authorize_header(request, route)
                self._bodies(request, route)
            response = await handler(request)
        except api.ApiError as error:
            response = self._error(shape, error)
        except web.HTTPException as error:  # aiohttp's 413
            response = self._error(shape, _from_http(error, request))
        except ClientGone:
            service.metrics.errors.labels("cancelled").inc()
            response = web.Response(status=499)  # nobody reads it
        except Exception:  # a bug must cost one request, not the server
            log.exception("internal error answering %s %s", request.method, request.path[:200])
            response = self._error(
                shape,
                api.ApiError(
                    500, "internal error (see the service log)", "internal", kind="internal"
                ),
            )
        finally:
            service.end()
            if guard is not None:
                guard.request_finished(request.content.is_eof())
        expected = request.headers.get("Expect", "").lower() == "100-continue"
        if service.draining.is_set() or (expected and not request.content.is_eof()):
            # Draining; or a refused body its client will never send (aiohttp 3.8 ignores
            # an answer of the expect handler, so a refusal can come from here as well).
            response.force_close()
            response.headers["Connection"] = "close"
        response.headers["Server"] = "npuctl-serve"
        # Counted before it is sent: a client reading /metrics next finds its request there.
        service.metrics.answered(
            route.path if route else "other", response.status, time.perf_counter() - started
        )
        return response

    async def _unmatched(self, request: web.Request) -> web.Response:
        raise _unmatched(request)

    async def _refuse(self, request: web.Request) -> web.StreamResponse:
        """Expect: 100-continue on a path that is not served: refused before the body."""
        response = self._error(routes.api_of(request.path), _unmatched(request))
        response.force_close()
        response.headers["Connection"] = "close"
        self.service.metrics.answered("other", response.status, 0.0)
        return response

    def _error(self, shape: str, error: api.ApiError) -> web.Response:
        self.service.metrics.errors.labels(error.kind).inc()
        response = web.Response(
            body=error_body(shape, error),
            status=error.status,
            content_type=JSON,
            headers=error.headers,
        )
        return response

    # -- what a request must be before its body is read ----------------------------------
    def _keyed(self, route: Route) -> bool:
        return self.service.key is not None and route.public not in self.service.public

    def _authorize_header(self, request: web.Request, route: Route) -> None:
        """The key from the Authorization header. DeepStack's clients may send it as a form
        field instead: their routes check it once the form is read (and before the image is
        decoded)."""
        if not self._keyed(route) or route.api == DEEPSTACK:
            return
        if not self.service.authorized(auth.bearer(request.headers)):
            raise unauthorized()

    def _bodies(self, request: web.Request, route: Route) -> None:
        if route.body is None:
            return
        limits = self.service.limits
        limit = limits.max_upload if route.body == UPLOAD else limits.max_body
        if request.content_length is not None and request.content_length > limit:
            raise _too_large(request.content_length, limit, route)
        chunked = "chunked" in request.headers.get("Transfer-Encoding", "").lower()
        if request.method == "POST" and request.content_length is None and not chunked:
            raise api.ApiError(
                411, "a Content-Length header (or a chunked body) is required", "length_required"
            )
        encoding = request.headers.get("Content-Encoding", "identity").strip().lower()
        if encoding not in ENCODINGS:
            raise api.ApiError(
                415,
                f"Content-Encoding {encoding[:40]!r} is not read here: send gzip, deflate or none",
                "unsupported_media_type",
            )

    async def _expect(self, route: Route, request: web.Request) -> web.StreamResponse | None:
        """Expect: 100-continue (curl sends it above 1 MiB): a body that would be refused is
        refused before the client sends it, in the route's shape."""
        if request.headers.get("Expect", "").lower() != "100-continue":
            return self._error(
                route.api,
                api.ApiError(417, "only 100-continue is understood", "expectation_failed"),
            )
        try:
            self._authorize_header(request, route)
            self._bodies(request, route)
        except api.ApiError as error:
            response = self._error(route.api, error)
            # The body never comes: nothing is left to read (aiohttp 3.8 writes no header
            # for force_close here, so it is said too).
            response.force_close()
            response.headers["Connection"] = "close"
            self.service.metrics.answered(route.path, error.status, 0.0)
            return response
        if request.version >= (1, 1):
            await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        return None

    # -- bodies ---------------------------------------------------------------------------
    async def _read(self, request: web.Request, route: Route) -> bytes:
        limits = self.service.limits
        limit = limits.max_upload if route.body == UPLOAD else limits.max_body
        try:
            if request.content.is_eof():  # all here already: no timer needed
                body = await request.read()
            else:
                async with asyncio.timeout(limits.body_timeout):
                    body = await request.read()
        except TimeoutError:
            raise _too_slow(limits.body_timeout) from None
        if len(body) > limit:  # a chunked or compressed body says its size only at the end
            raise _too_large(len(body), limit, route)
        return body

    async def _form(self, request: web.Request) -> dict[str, bytes]:
        """The form's fields by name (the first of repeated names), files as their bytes."""
        media = request.content_type
        if media not in ("multipart/form-data", "application/x-www-form-urlencoded"):
            raise api.ApiError(
                400,
                f"the body is {media or 'of no type'}, not a form: send multipart/form-data "
                "with the image in the field 'image'",
                "invalid_request",
            )
        timeout = self.service.limits.body_timeout
        try:
            async with asyncio.timeout(timeout):
                if media == "multipart/form-data":
                    return await self._parts(request)
                form = await request.post()  # urlencoded: held to client_max_size
        except TimeoutError:
            raise _too_slow(timeout) from None
        except (
            ValueError,
            AssertionError,
            LookupError,
            UnicodeDecodeError,
            HttpProcessingError,  # a part's head that is no HTTP header
        ) as error:
            message = str(error).replace("\n", " ")
            raise api.ApiError(
                400, f"the form is not well formed ({message})"[:300], "invalid_request"
            ) from None
        fields: dict[str, bytes] = {}
        for name, value in form.items():  # urlencoded: text only (files come in _parts)
            if isinstance(value, str):
                fields.setdefault(name, value.encode())
        return fields

    async def _parts(self, request: web.Request) -> dict[str, bytes]:
        """A multipart form read into memory part by part, held to the upload limit as it
        arrives (aiohttp's own reading would spool files to a temporary file, which a
        read-only container has no room for)."""
        limit = self.service.limits.max_upload
        fields: dict[str, bytes] = {}
        total = 0
        reader = await request.multipart()
        for _ in range(MAX_PARTS + 1):
            part = await reader.next()
            if part is None:
                return fields
            if not isinstance(part, BodyPartReader):
                raise api.ApiError(400, "a form part holds another form", "invalid_request")
            chunks = []
            while chunk := await part.read_chunk(65536):
                total += len(chunk)
                if total > limit:
                    raise _too_large(total, limit, _route(request))
                chunks.append(chunk)
            name = part_name(part)
            if name is not None:
                fields.setdefault(name, b"".join(chunks))
        raise api.ApiError(400, f"the form has more than {MAX_PARTS} parts", "invalid_request")

    async def _blocking(self, function: Callable[..., Any], *args: Any) -> Any:
        return await self.loop.run_in_executor(self.threads, functools.partial(function, *args))

    @staticmethod
    def _peer_gone(request: web.Request) -> Callable[[], bool]:
        def gone() -> bool:
            transport = request.transport
            return transport is None or transport.is_closing()

        return gone

    # -- the server's own routes ----------------------------------------------------------
    async def health(self, request: web.Request) -> web.Response:
        ok, reason = self.service.healthy()
        return _json(
            {"status": "ok"} if ok else {"status": "unhealthy", "reason": reason},
            200 if ok else 503,
        )

    async def ready(self, request: web.Request) -> web.Response:
        ok, reason = await self._blocking(self.service.ready)
        return _json(
            {"status": "ready" if ok else "unavailable", "reason": reason}, 200 if ok else 503
        )

    async def metrics(self, request: web.Request) -> web.Response:
        response = web.Response(body=self.service.metrics.render())
        response.headers["Content-Type"] = CONTENT_TYPE
        return response

    async def openapi(self, request: web.Request) -> web.Response:
        return web.Response(body=openapi.document(self.service), content_type=JSON)

    # -- OpenAI ---------------------------------------------------------------------------
    def _model_list(self) -> list[dict[str, Any]]:
        service = self.service
        return [
            {"id": name, "object": "model", "created": service.created, "owned_by": "npuctl"}
            for name in service.model_names
        ]

    async def models(self, request: web.Request) -> web.Response:
        return _json({"object": "list", "data": self._model_list()})

    async def model(self, request: web.Request) -> web.Response:
        wanted = request.match_info["model"]
        for model in self._model_list():
            if model["id"] == wanted:
                return _json(model)
        raise api.ApiError(
            404,
            f"the model {wanted[:100]!r} does not exist",
            "model_not_found",
            kind="model_not_found",
        )

    async def embeddings(self, request: web.Request) -> web.Response:
        body = await self._read(request, _route(request))
        service = self.service
        if len(body) > INLINE_BODY or b"image" in body:
            # Images to decode, or a large body to parse: off the event loop.
            answer = await self._blocking(service.embed, body, self._peer_gone(request))
        else:  # a few short texts: tokenized here, which costs less than a thread's hand-over
            asked, works = service.embed_prepare(body)
            answer = service.embed_answer(asked, await self._outputs(works))
        return web.Response(body=answer, content_type=JSON)

    async def _outputs(self, works: list[Work]) -> list[list[Any]]:
        """Each work's outputs, awaited without a thread: the NPU owner wakes the loop when
        one is done. A client that leaves cancels the handler (and so its inputs); a call
        that does not return by the deadline ends the request with 504."""
        loop = self.loop
        results = []
        try:
            for work in works:
                done = loop.create_future()

                def settle(done: asyncio.Future[None] = done) -> None:
                    if not done.done():
                        done.set_result(None)

                def notify(settle: Callable[[], None] = settle) -> None:
                    loop.call_soon_threadsafe(settle)

                work.notify = notify
                if work.done:
                    settle()
                hung = work.deadline + self.service.limits.deadline
                # A plain timer settles it too: cheaper than a timeout's cancellation.
                timer = loop.call_at(loop.time() + hung - time.monotonic(), settle)
                await done
                timer.cancel()
                if not work.done:
                    raise self.service.hung(work)
                results.append(self.service.outputs(work))
        except BaseException:
            for work in works:
                work.cancelled = True
            raise
        return results

    # -- DeepStack ------------------------------------------------------------------------
    async def detection(self, request: web.Request) -> web.Response:
        return await self._vision(request, DETECTION)

    async def classification(self, request: web.Request) -> web.Response:
        return await self._vision(request, CLASSIFICATION)

    async def _vision(self, request: web.Request, task: str) -> web.Response:
        fields = await self._form(request)
        route = _route(request)
        if self._keyed(route) and not self.service.authorized(
            fields.get("api_key"), auth.bearer(request.headers)
        ):
            raise unauthorized()
        try:
            asked = vision_api.parse(fields)
        except vision_api.VisionError as error:
            raise api.ApiError(400, str(error), "invalid_request") from None
        body, headers = await self._blocking(
            self.service.vision, task, asked, self._peer_gone(request)
        )
        return web.Response(body=body, content_type=JSON, headers=headers)

    async def deepstack_unserved(self, request: web.Request) -> web.Response:
        name = request.match_info["unserved"]
        if name in (DETECTION, CLASSIFICATION):
            raise api.ApiError(
                405, f"use POST /v1/vision/{name}", "method_not_allowed", headers={"Allow": "POST"}
            )
        raise api.ApiError(
            404,
            f"this server does not offer /v1/vision/{name[:100]}: it serves "
            "/v1/vision/detection and /v1/vision/classification",
            "not_found",
            kind="not_found",
        )

    # -- Immich's machine learning ---------------------------------------------------------
    async def immich_ping(self, request: web.Request) -> web.Response:
        return web.Response(text="pong")

    async def immich_root(self, request: web.Request) -> web.Response:
        return _json(immich.ROOT)

    async def immich_predict(self, request: web.Request) -> web.Response:
        fields = await self._form(request)
        service = self.service
        asked = service.immich_parse(fields)
        if asked.image is not None:  # decoding and resizing: a request thread's work
            answer, headers = await self._blocking(
                service.immich_photo, asked, self._peer_gone(request)
            )
            return web.Response(body=answer, content_type=JSON, headers=headers)
        if len(asked.text or "") > INLINE_BODY:
            prepared, works = await self._blocking(service.immich_text, asked)
        else:  # a search query: tokenized here, cheaper than a thread's hand-over
            prepared, works = service.immich_text(asked)
        (outputs,) = await self._outputs(works)
        return web.Response(body=service.immich_answer(prepared, outputs, None), content_type=JSON)

    # -- KServe v2 ------------------------------------------------------------------------
    async def v2_server(self, request: web.Request) -> web.Response:
        extensions = ["binary_tensor_data", "classification", "statistics", "model_repository"]
        return _json({"name": "npuctl", "version": __version__, "extensions": extensions})

    async def v2_live(self, request: web.Request) -> web.Response:
        return web.Response(status=200 if self.service.healthy()[0] else 503)

    async def v2_ready(self, request: web.Request) -> web.Response:
        ok, _ = await self._blocking(self.service.ready)
        return web.Response(status=200 if ok else 503)

    async def v2_index(self, request: web.Request) -> web.Response:
        await self._read_small(request)
        ready = self.service.loaded.is_set()
        return _json(kserve.repository_index(list(self.service.serving.models), ready))

    async def v2_all_stats(self, request: web.Request) -> web.Response:
        return _json(self.service.stats.document(list(self.service.serving.models)))

    def _v2_model(self, request: web.Request) -> ServedModel:
        name = request.match_info["name"]
        version = request.match_info.get("version", kserve.VERSION)
        model = self.service.v2_model(name)  # 404 for an unknown name
        if version != kserve.VERSION:
            raise api.ApiError(
                404,
                f"{name} has version {kserve.VERSION} only, not {version[:20]!r}",
                "model_not_found",
                kind="model_not_found",
            )
        return model

    async def v2_model(self, request: web.Request) -> web.Response:
        model = self._v2_model(request)
        return _json(kserve.metadata(model, self.service.platform))

    async def v2_model_ready(self, request: web.Request) -> web.Response:
        self._v2_model(request)
        ok, _ = await self._blocking(self.service.ready)
        return web.Response(status=200 if ok else 503)

    async def v2_config(self, request: web.Request) -> web.Response:
        model = self._v2_model(request)
        return _json(kserve.config(model, self.service.platform))

    async def v2_stats(self, request: web.Request) -> web.Response:
        return _json(self.service.stats.document([self._v2_model(request).name]))

    async def v2_infer(self, request: web.Request) -> web.Response:
        name = self._v2_model(request).name
        body = await self._read(request, _route(request))
        answer, headers = await self._blocking(
            self.service.v2_infer, name, body, request.headers, self._peer_gone(request)
        )
        binary = any(key.lower() == kserve.HEADER_LENGTH for key in headers)
        response = web.Response(body=answer, headers=headers)
        response.content_type = "application/octet-stream" if binary else JSON
        return response

    async def _read_small(self, request: web.Request) -> bytes:
        """A body the route ignores (the index's optional filter), read within the text limit."""
        route = Route("POST", request.path, "", V2, "", body=routes.TEXT)
        return await self._read(request, route)


def part_name(part: BodyPartReader) -> str | None:
    """The name of a form's part, as aiohttp's BodyPartReader.name gives it."""
    plain = _PLAIN_DISPOSITION.fullmatch(part.headers.get("Content-Disposition", ""))
    return plain.group(1) if plain else part.name


def _route(request: web.Request) -> Route:
    return request.match_info.handler.route  # type: ignore[attr-defined]


def _too_large(size: int, limit: int, route: Route) -> api.ApiError:
    flag = "--max-upload" if route.body == UPLOAD else "--max-body"
    return api.ApiError(
        413,
        f"the body is {size:,} bytes, over this route's limit of {limit:,} (split the "
        f"request, or raise {flag})",
        "request_too_large",
        kind="too_large",
    )


def _too_slow(seconds: float) -> api.ApiError:
    return api.ApiError(
        408,
        f"the body took over {seconds:g} s to arrive",
        "request_timeout",
        kind="slow_client",
        headers={"Connection": "close"},
    )


def _unmatched(request: web.Request) -> api.ApiError:
    """404 for a path that is not served, whatever the method; 405 (with Allow) for a served
    path asked with another method."""
    allowed = routes.methods_at(request.path)
    if not allowed:
        return api.ApiError(
            404, f"no such endpoint: {request.path[:200]}", "not_found", kind="not_found"
        )
    return api.ApiError(
        405,
        f"{request.method} is not served here: use {','.join(allowed)}",
        "method_not_allowed",
        kind="invalid_request",
        headers={"Allow": ",".join(allowed)},
    )


def _from_http(error: web.HTTPException, request: web.Request) -> api.ApiError:
    """aiohttp's own refusals (a body over the size limit) as this server's errors."""
    if error.status == 413:
        return api.ApiError(
            413, str(error.text or error.reason), "request_too_large", kind="too_large"
        )
    return api.ApiError(error.status, error.reason, "invalid_request")
