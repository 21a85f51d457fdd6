"""The HTTP side of npuctl serve: a thread per connection (keep-alive, Nagle off), on TCP and
on a unix socket, the wire format in .wire, and every resource a client controls bounded:
connections, body size, inputs per request, time to send a request (slowloris), time in the
queue."""

from __future__ import annotations

import contextlib
import json
import logging
import re
import select
import socket
import socketserver
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import __version__
from ..defaults import DEFAULT_MAX_IMAGE_PIXELS
from ..embedder import NpuFailure
from ..embeddings import normalise
from ..errors import InputError
from ..images import decode_rgb
from . import api, auth, kserve, openapi, vision_api, wire
from .metrics import CONTENT_TYPE, Metrics
from .models import CLASSIFICATION, DETECTION, ServedModel, Serving
from .owner import GOLDEN_MIN_COSINE, NpuOwner, QueueFull, Work, golden_view, similarity

log = logging.getLogger("npuctl.serve")

ENDPOINTS = (
    "/v1/embeddings",
    "/v1/models",
    "/v1/vision/detection",
    "/v1/vision/classification",
    "/v2",
    "/v2/health/live",
    "/v2/health/ready",
    "/v2/models/{name}",
    "/v2/models/{name}/ready",
    "/v2/models/{name}/infer",
    "/health",
    "/ready",
    "/metrics",
    "/openapi.json",
)
JSON = "application/json"
# What answers without the API key: --public takes these names.
PUBLIC_PATHS = {
    "health": ("/health", "/ready", "/v2/health/live", "/v2/health/ready"),
    "metrics": ("/metrics",),
    "openapi": ("/openapi.json",),
}
PUBLIC_DEFAULT = frozenset({"health", "openapi"})
_V2_MODEL = re.compile(r"^/v2/models/([^/]+)(?:/versions/1)?(/ready|/infer)?$")
# How often a waiting request looks whether its client is still there.
_PEER_CHECK_SECONDS = 0.2


@dataclass(frozen=True)
class Limits:
    max_body: int = 2 * 1024 * 1024  # bytes of one request body (text-embeddings-inference's)
    max_inputs: int = 64  # inputs in one request
    max_connections: int = 64  # open at once; more are answered 503 and closed
    read_timeout: float = 10.0  # seconds to send one request, and to idle on keep-alive
    deadline: float = 30.0  # seconds from a complete request to the start of its inference
    ready_interval: float = 5.0  # /ready recomputes the golden answers at most this often
    max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS  # of one uploaded image (before decoding)


class ClientGone(Exception):
    pass


class Service:
    """What every listener shares: the NPU owners, the served models, the limits, the
    metrics, the open connections and the requests in flight (for draining)."""

    def __init__(
        self,
        serving: Serving,
        owner: NpuOwner,
        metrics: Metrics,
        limits: Limits,
        truncate: bool,
        platform: str = "npuctl",
        key: bytes | None = None,
        public: frozenset[str] = PUBLIC_DEFAULT,
    ) -> None:
        self.serving = serving
        self.embedder = serving.embedder
        self.owner = owner
        self.metrics = metrics
        self.limits = limits
        self.model_names = self.embedder.model_names if self.embedder else ()
        self.truncate = truncate
        self.platform = platform
        self.key = key
        self.public = public
        self.created = int(time.time())
        self.loaded = threading.Event()
        self.draining = threading.Event()
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._in_flight = 0
        self._connections = 0
        self._reading: dict[socket.socket, float] = {}
        self._ready_lock = threading.Lock()
        self._ready: tuple[float, bool, str] = (0.0, False, "not checked yet")

    # -- connections ----------------------------------------------------------------------
    def admit(self) -> bool:
        with self._lock:
            if self._connections >= self.limits.max_connections:
                return False
            self._connections += 1
            return True

    def release(self) -> None:
        with self._lock:
            self._connections -= 1

    def reading(self, connection: socket.socket) -> None:
        with self._lock:
            self._reading[connection] = time.monotonic()

    def done_reading(self, connection: socket.socket) -> None:
        with self._lock:
            self._reading.pop(connection, None)

    def reap_slow_clients(self, stop: threading.Event) -> None:
        """Close connections that take longer than read_timeout to send one request: a
        socket timeout alone lets a client dribble one byte at a time forever."""
        interval = min(1.0, self.limits.read_timeout / 4)
        while not stop.wait(interval):
            cutoff = time.monotonic() - self.limits.read_timeout
            with self._lock:
                slow = [conn for conn, since in self._reading.items() if since < cutoff]
                for connection in slow:
                    del self._reading[connection]
            for connection in slow:
                self.metrics.errors.labels("slow_client").inc()
                with contextlib.suppress(OSError):
                    connection.shutdown(socket.SHUT_RDWR)

    # -- requests in flight ---------------------------------------------------------------
    def begin(self) -> None:
        with self._lock:
            self._in_flight += 1

    def end(self) -> None:
        with self._lock:
            self._in_flight -= 1
            if not self._in_flight:
                self._idle.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        with self._lock:
            return self._idle.wait_for(lambda: not self._in_flight, timeout)

    # -- answers --------------------------------------------------------------------------
    def authorized(self, offered: bytes | None) -> bool:
        return self.key is None or auth.matches(self.key, offered)

    def ready(self) -> tuple[bool, str]:
        if self.draining.is_set():
            return False, "shutting down"
        if not self.loaded.is_set():
            return False, "loading the models"
        with self._ready_lock:
            checked, ok, reason = self._ready
            if time.monotonic() - checked < self.limits.ready_interval:
                return ok, reason
            ok, reason = True, "ready"
            for name, model in self.serving.models.items():
                try:
                    outputs, _ = self._infer(model.key, model.golden()[0], lambda: False)
                except api.ApiError as error:
                    if error.status == 429:
                        return self._ready[1], self._ready[2]  # busy, not broken
                    ok, reason = False, f"{name}: the golden input failed: {error}"
                    break
                agreement = similarity(golden_view(model, outputs), self.owner.golden[name])
                if agreement < GOLDEN_MIN_COSINE:
                    ok, reason = (
                        False,
                        (
                            f"{name}: the golden answer drifted (cosine {agreement:.4f} to "
                            "the one computed at start): run 'npuctl doctor'"
                        ),
                    )
                    break
            self._ready = (time.monotonic(), ok, reason)
            self.metrics.ready.set(1 if ok else 0)
            return ok, reason

    def _check_loaded(self) -> None:
        if not self.loaded.is_set():
            raise api.ApiError(
                503,
                "the models are still loading",
                "loading",
                kind="loading",
                headers={"Retry-After": "1"},
            )

    def _submit(self, items: list[tuple[str, list[np.ndarray]]]) -> list[Work]:
        try:
            return self.owner.submit(items, time.monotonic() + self.limits.deadline)
        except QueueFull as full:
            raise api.ApiError(
                429,
                f"the NPU's queue is full ({self.owner.capacity} inputs): {full}",
                "queue_full",
                kind="queue_full",
                headers={"Retry-After": str(full.retry_after)},
            ) from None

    def _infer(
        self, key: str, tensors: list[np.ndarray], peer_gone: Callable[[], bool]
    ) -> tuple[list[np.ndarray], Work]:
        (work,) = works = self._submit([(key, tensors)])
        (outputs,) = self._results(works, peer_gone)
        return outputs, work

    def embed(self, body: bytes, peer_gone: Callable[[], bool]) -> bytes:
        self._check_loaded()
        embedder = self.embedder
        if embedder is None:
            raise api.ApiError(
                404,
                "this server has no embedding model: start it with an embedding model in "
                "--models (GET /v2/models lists what it serves)",
                "model_not_found",
                kind="model_not_found",
            )
        started = time.perf_counter()
        request = api.parse(body, embedder, self.model_names, self.limits.max_inputs, self.truncate)
        prepared = time.perf_counter()
        self.metrics.stage("preprocess", prepared - started)
        works = self._submit(
            [(embedder.keys[item.modality], [item.tensor]) for item in request.inputs]
        )
        results = self._results(works, peer_gone)
        encoded = time.perf_counter()
        encode = api.encoder(request.encoding)
        tokens = sum(item.tokens for item in request.inputs)
        vectors = [
            encode(normalise(embedder.vector(item.modality, outputs)))
            for item, outputs in zip(request.inputs, results, strict=True)
        ]
        answer = api.reply(vectors, self.model_names[0], tokens)
        self.metrics.stage("serialize", time.perf_counter() - encoded)
        for item in request.inputs:
            self.metrics.input(item.modality)
            self.metrics.model_answered(embedder.keys[item.modality], "ok")
        self.metrics.tokens.inc(tokens)
        return answer

    def vision(
        self, task: str, request: wire.Request, peer_gone: Callable[[], bool]
    ) -> tuple[bytes, dict[str, str]]:
        """POST /v1/vision/detection or /classification, DeepStack's way; the answer's
        Server-Timing header tells where its time went."""
        self._check_loaded()
        started, cpu_started = time.perf_counter(), time.thread_time()
        try:
            asked = vision_api.parse(_body(request), request.headers.get("content-type", ""))
        except vision_api.VisionError as error:
            raise api.ApiError(400, str(error), "invalid_request") from None
        offered = asked.api_key if asked.api_key is not None else auth.bearer(request.headers)
        if not self.authorized(offered):
            raise _unauthorized()
        candidates = self.serving.of_task(task)
        if not candidates:
            raise api.ApiError(
                404,
                f"this server has no {task} model: start it with one in --models "
                "(GET /v2/models lists what it serves)",
                "model_not_found",
                kind="model_not_found",
            )
        model = candidates[0]
        decoding, cpu_decoding = time.perf_counter(), time.thread_time()
        try:
            picture = decode_rgb(asked.image, self.limits.max_image_pixels, "the image")
        except InputError as error:
            raise api.ApiError(400, str(error), "invalid_image") from None
        decoded, decode_cpu = time.perf_counter(), time.thread_time() - cpu_decoding
        tensors, context = model.prepare(picture)  # type: ignore[attr-defined]
        preprocess = time.perf_counter() - decoded + (decoding - started)
        self.metrics.stage("decode", decoded - decoding)
        self.metrics.stage("preprocess", preprocess)
        outputs, work = self._infer(model.key, tensors, peer_gone)
        finished = time.perf_counter()
        if task == DETECTION:
            found = model.detections(outputs, context, asked.min_confidence)  # type: ignore[attr-defined]
            answer = vision_api.detection_reply(found, finished - started)
        else:
            classes = model.classes(outputs, asked.top_k)  # type: ignore[attr-defined]
            answer = vision_api.classification_reply(classes, finished - started)
        answered = time.perf_counter()
        self.metrics.stage("serialize", answered - finished)
        self.metrics.model_answered(model.name, "ok")
        return answer, server_timing(
            decode=decoded - decoding,
            preprocess=preprocess,
            queue=work.queued_seconds,
            npu=work.npu_seconds,
            postprocess=answered - finished,
            total=answered - started,
            # the request's own work, decode aside: what a busy machine cannot inflate
            cpu=time.thread_time() - cpu_started - decode_cpu,
        )

    def v2_infer(
        self, name: str, request: wire.Request, peer_gone: Callable[[], bool]
    ) -> tuple[bytes, dict[str, str]]:
        self._check_loaded()
        model = self.v2_model(name)
        started = time.perf_counter()
        try:
            asked = kserve.parse(_body(request), request.headers, model)
        except kserve.V2Error as error:
            raise api.ApiError(400, str(error), "invalid_request") from None
        parsed = time.perf_counter()
        self.metrics.stage("preprocess", parsed - started)
        outputs, work = self._infer(model.key, asked.tensors, peer_gone)
        finished = time.perf_counter()
        body, headers = kserve.reply(model, asked, outputs)
        answered = time.perf_counter()
        self.metrics.stage("serialize", answered - finished)
        self.metrics.model_answered(model.name, "ok")
        timing = server_timing(
            preprocess=parsed - started,
            queue=work.queued_seconds,
            npu=work.npu_seconds,
            postprocess=answered - finished,
            total=answered - started,
        )
        return body, {**headers, **timing}

    def v2_model(self, name: str) -> ServedModel:
        model = self.serving.models.get(name)
        if model is None:
            raise api.ApiError(
                404,
                f"no model {name[:100]!r}; this server has {', '.join(self.serving.models)}",
                "model_not_found",
                kind="model_not_found",
            )
        return model

    def _results(self, works: list[Work], peer_gone: Callable[[], bool]) -> list[list[np.ndarray]]:
        results = []
        for work in works:
            try:
                while (outputs := work.result(_PEER_CHECK_SECONDS)) is None:
                    if peer_gone():
                        raise ClientGone
            except ClientGone:
                _cancel(works)
                raise
            except NpuFailure as failure:
                _cancel(works)
                self.metrics.model_answered(work.key, failure.kind)
                raise api.ApiError(
                    503, f"the NPU failed: {failure}", failure.kind, kind=failure.kind
                ) from None
            results.append(outputs)
        return results


def server_timing(**seconds: float) -> dict[str, str]:
    """The W3C Server-Timing header (milliseconds): browsers' and curl users' view of where a
    request's time went, and the benchmark's."""
    stages = ", ".join(f"{name};dur={value * 1000:.3f}" for name, value in seconds.items())
    return {"Server-Timing": stages}


def _unauthorized() -> api.ApiError:
    return api.ApiError(
        401,
        "a valid API key is required: send 'Authorization: Bearer KEY' (or the form field api_key)",
        "invalid_api_key",
        kind="unauthorized",
        headers={"WWW-Authenticate": "Bearer"},
    )


def _cancel(works: list[Work]) -> None:
    for work in works:
        work.cancelled = True


class Handler(socketserver.BaseRequestHandler):
    """One connection: requests read in order, each answered before the next is read."""

    server: Listener  # type: ignore[assignment]
    request: socket.socket

    def handle(self) -> None:
        connection = self.request
        service = self.server.service
        connection.settimeout(service.limits.read_timeout)
        if connection.family in (socket.AF_INET, socket.AF_INET6):
            # Without it a keep-alive reply waits for the client's delayed ACK: ~40 ms.
            connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        reader = wire.RequestReader(service.limits.max_body)
        service.reading(connection)
        try:
            while data := connection.recv(65536):
                try:
                    reader.feed(data)
                except wire.WireError as error:
                    service.metrics.errors.labels(error.kind).inc()
                    body = api.ApiError(error.status, str(error), error.code).body()
                    connection.sendall(wire.response(error.status, body, JSON, {}, close=True))
                    return
                if reader.continue_owed():
                    connection.sendall(wire.CONTINUE)
                while reader.complete:
                    request = reader.complete.popleft()
                    if not reader.complete and not reader.busy:
                        service.done_reading(connection)
                    if not self._answer(request) or reader.upgrade:
                        return
                    service.reading(connection)
        except OSError:  # a timeout, a reset, or the slow-client reaper's shutdown
            return
        finally:
            reader.close()
            service.done_reading(connection)

    def _answer(self, request: wire.Request) -> bool:
        """Answer one request; whether the connection stays open."""
        service = self.server.service
        method, path = request.method, request.path
        endpoint = _endpoint(path)
        close = not request.keep_alive
        service.begin()
        started = time.perf_counter()
        try:
            status, body, content_type, headers = self._route(request)
        except ClientGone:
            service.metrics.errors.labels("cancelled").inc()
            service.end()
            return False
        except api.ApiError as error:
            status, body, content_type, headers = (
                error.status,
                _error_body(path, error),
                JSON,
                error.headers,
            )
            service.metrics.errors.labels(error.kind).inc()
        except Exception:  # a bug must cost one request, not the server
            log.exception("internal error answering %s %s", method, path[:200])
            error = api.ApiError(500, "internal error (see the service log)", "internal")
            status, body, content_type, headers = 500, _error_body(path, error), JSON, {}
            service.metrics.errors.labels("internal").inc()
        close = close or service.draining.is_set()
        # Counted before it is sent: a client that reads /metrics right after its answer
        # must find its request there.
        service.metrics.answered(endpoint, status, time.perf_counter() - started)
        try:
            self.request.sendall(
                wire.response(
                    status,
                    body,
                    content_type,
                    headers,
                    close,
                    keep_alive_header=request.version == "1.0",
                    head_only=method == "HEAD",
                )
            )
        except OSError:  # the client went away; nothing to answer
            close = True
        finally:
            service.end()
        return not close

    def _route(self, request: wire.Request) -> tuple[int, bytes, str, dict[str, str]]:
        service = self.server.service
        method, path = request.method, request.path
        if method not in ("GET", "HEAD", "POST"):
            raise api.ApiError(405, f"{method} is not served here", "method_not_allowed")
        if (
            service.key is not None
            and not path.startswith("/v1/vision/")  # DeepStack's key may be in the form
            and not _public(path, service.public)
            and not service.authorized(auth.bearer(request.headers))
        ):
            raise _unauthorized()
        if method == "POST":
            return self._post(request)
        if path == "/health":
            return 200, b'{"status":"ok"}', JSON, {}
        if path == "/ready":
            ok, reason = service.ready()
            body = json.dumps({"status": "ready" if ok else "unavailable", "reason": reason})
            return (200 if ok else 503), body.encode(), JSON, {}
        if path == "/metrics":
            return 200, service.metrics.render(), CONTENT_TYPE, {}
        if path == "/openapi.json":
            return 200, openapi.document(service), JSON, {}
        if path == "/v1/models" or path.startswith("/v1/models/"):
            return self._models(path)
        if path == "/v2/health/live":
            return 200, b"", JSON, {}
        if path == "/v2/health/ready":
            return (200 if service.ready()[0] else 503), b"", JSON, {}
        if path == "/v2":
            document = {
                "name": "npuctl",
                "version": __version__,
                "extensions": ["binary_tensor_data"],
            }
            return 200, json.dumps(document).encode(), JSON, {}
        found = _V2_MODEL.match(path)
        if found and found.group(2) != "/infer":
            model = service.v2_model(found.group(1))
            if found.group(2) == "/ready":
                return (200 if service.ready()[0] else 503), b"", JSON, {}
            document = kserve.metadata(model, service.platform)
            return 200, json.dumps(document).encode(), JSON, {}
        if path in POST_ENDPOINTS or found:
            raise api.ApiError(405, f"use POST {path[:200]}", "method_not_allowed")
        raise api.ApiError(404, f"no such endpoint: {path[:200]}", "not_found")

    def _post(self, request: wire.Request) -> tuple[int, bytes, str, dict[str, str]]:
        service = self.server.service
        path = request.path
        found = _V2_MODEL.match(path)
        if path not in POST_ENDPOINTS and not (found and found.group(2) == "/infer"):
            raise api.ApiError(405, f"{path[:200]} takes GET", "method_not_allowed")
        if service.draining.is_set():
            raise api.ApiError(503, "the server is shutting down", "shutting_down")
        if path == "/v1/embeddings":
            return 200, service.embed(_body(request), self._peer_gone), JSON, {}
        if found:
            body, headers = service.v2_infer(found.group(1), request, self._peer_gone)
            binary = any(name.lower() == kserve.HEADER_LENGTH for name in headers)
            return 200, body, "application/octet-stream" if binary else JSON, headers
        task = DETECTION if path == "/v1/vision/detection" else CLASSIFICATION
        body, headers = service.vision(task, request, self._peer_gone)
        return 200, body, JSON, headers

    def _models(self, path: str) -> tuple[int, bytes, str, dict[str, str]]:
        service = self.server.service
        models = [
            {"id": name, "object": "model", "created": service.created, "owned_by": "npuctl"}
            for name in service.model_names
        ]
        if path == "/v1/models":
            document: object = {"object": "list", "data": models}
        else:
            wanted = path.removeprefix("/v1/models/")
            found = [model for model in models if model["id"] == wanted]
            if not found:
                raise api.ApiError(
                    404, f"the model {wanted[:100]!r} does not exist", "model_not_found"
                )
            document = found[0]
        return 200, json.dumps(document).encode(), JSON, {}

    def _peer_gone(self) -> bool:
        """Whether the client closed its end while its request waited."""
        connection = self.request
        try:
            readable, _, _ = select.select([connection], [], [], 0)
            if not readable:
                return False
            return connection.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
        except (OSError, ValueError):
            return True


POST_ENDPOINTS = ("/v1/embeddings", "/v1/vision/detection", "/v1/vision/classification")


def _endpoint(path: str) -> str:
    """A bounded label set: every model id counts as its route, anything else as other."""
    if path.startswith("/v1/models/"):
        return "/v1/models"
    found = _V2_MODEL.match(path)
    if found:
        return "/v2/models/{name}" + (found.group(2) or "")
    return path if path in ENDPOINTS else "other"


def _public(path: str, public: frozenset[str]) -> bool:
    return any(path in PUBLIC_PATHS[name] for name in public)


def _error_body(path: str, error: api.ApiError) -> bytes:
    """The error in the shape of the API the path belongs to."""
    if path.startswith("/v1/vision/"):
        return vision_api.error_body(error.status, str(error))
    if path.startswith("/v2"):
        return json.dumps({"error": str(error)}).encode()
    return error.body()


def _body(request: wire.Request) -> bytes:
    if request.refused is not None:
        error = request.refused
        raise api.ApiError(error.status, str(error), error.code, kind=error.kind)
    if not request.length_known:
        raise api.ApiError(
            411, "a Content-Length header (or a chunked body) is required", "length_required"
        )
    return request.body


def busy_answer() -> bytes:
    """The answer to a connection over the limit, made like every other answer (one writer:
    its Content-Length is the body's), so a client gets the whole 503 and its Retry-After."""
    error = api.ApiError(
        503,
        "too many open connections: retry later",
        "busy",
        kind="busy",
        headers={"Retry-After": "1"},
    )
    return wire.response(error.status, error.body(), JSON, error.headers, close=True)


# Refused connections whose request is still being read away before they close; past this
# many at once a refused connection is closed at once.
_MAX_LINGERING = 16
_LINGER_SECONDS = 1.0
_lingering = threading.BoundedSemaphore(_MAX_LINGERING)


def _close_after_reading(connection: socket.socket) -> None:
    """Close a refused connection without a reset: closing a socket with the client's request
    still unread sends an RST, and the client may lose the answer it has not yet read."""
    try:
        connection.shutdown(socket.SHUT_WR)
        connection.settimeout(_LINGER_SECONDS)
        deadline = time.monotonic() + _LINGER_SECONDS
        while time.monotonic() < deadline and connection.recv(65536):
            pass
    except OSError:
        pass
    finally:
        connection.close()
        _lingering.release()


class Listener(socketserver.ThreadingMixIn):
    """A thread per connection, up to max_connections; over that, 503 and close."""

    daemon_threads = True
    request_queue_size = 128
    service: Service

    def process_request(self, request: socket.socket, client_address: object) -> None:
        if not self.service.admit():
            self.service.metrics.errors.labels("busy").inc()
            try:
                request.sendall(busy_answer())
            except OSError:
                self.shutdown_request(request)  # type: ignore[attr-defined]
                return
            if _lingering.acquire(blocking=False):
                threading.Thread(target=_close_after_reading, args=(request,), daemon=True).start()
            else:
                self.shutdown_request(request)  # type: ignore[attr-defined]
            return
        super().process_request(request, client_address)  # type: ignore[misc]

    def process_request_thread(self, request: socket.socket, client_address: object) -> None:
        try:
            super().process_request_thread(request, client_address)  # type: ignore[misc]
        finally:
            self.service.release()

    def handle_error(self, request: socket.socket, client_address: object) -> None:
        log.debug("connection from %s ended with an error", client_address, exc_info=True)


class TcpListener(Listener, socketserver.TCPServer):
    allow_reuse_address = True

    def __init__(self, service: Service, host: str, port: int) -> None:
        self.service = service
        self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        socketserver.TCPServer.__init__(self, (host, port), Handler)


class UnixListener(Listener, socketserver.UnixStreamServer):
    def __init__(self, service: Service, path: Path) -> None:
        self.service = service
        _remove_stale_socket(path)
        socketserver.UnixStreamServer.__init__(self, str(path), Handler)
        # Anyone who may reach 127.0.0.1 may use the socket too; the folder decides more.
        path.chmod(0o666)


def _remove_stale_socket(path: Path) -> None:
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise OSError(f"{path} exists and is not a socket")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(str(path))
        except OSError:
            path.unlink()  # left behind by a server that is gone
            return
    raise OSError(f"another server is listening on {path}")
