"""HTTP/1.1 on one connection: bytes in, complete requests out, and answers as bytes.

Requests are parsed by httptools (the C parser under uvicorn) rather than by http.server,
whose header parsing through the email package costs more than the whole rest of a request.
Everything a client controls is bounded here: the target's length, the headers' size, the
body's size (an oversized body is read and dropped, or refused before it is sent)."""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from email.utils import formatdate
from http import HTTPStatus

import httptools

MAX_TARGET = 8 * 1024  # bytes of the request target (path and query)
MAX_HEADERS = 64 * 1024  # bytes of all header names and values of one request
# An oversized body up to this size is read and dropped before the 413, so a client that
# sends it whole reads the answer instead of a reset; a larger one is refused at once.
DISCARD_MAX = 64 * 1024 * 1024
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


class WireError(Exception):
    """A request that cannot be read to its end: answered with ``status``, then closed."""

    def __init__(self, status: int, message: str, code: str, kind: str = "invalid_request") -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.kind = kind


@dataclass(slots=True)
class Request:
    method: str = ""
    target: str = ""
    version: str = "1.1"
    headers: dict[str, str] = field(default_factory=dict)
    keep_alive: bool = True
    length_known: bool = False  # a Content-Length or a chunked body was announced
    declared: int | None = None  # the Content-Length
    refused: WireError | None = None  # the body was over the limit and dropped
    chunks: list[bytes] = field(default_factory=list)
    received: int = 0

    @property
    def body(self) -> bytes:
        return b"".join(self.chunks)

    @property
    def path(self) -> str:
        return self.target.partition("?")[0]


class RequestReader:
    """Feeds one connection's bytes to httptools and keeps the requests it completes, in
    order (a client may pipeline several in one packet)."""

    def __init__(self, max_body: int) -> None:
        self.max_body = max_body
        self.complete: deque[Request] = deque()
        self.upgrade = False  # the client asked to switch protocols: close after answering
        self._parser = httptools.HttpRequestParser(self)
        self._current: Request | None = None
        self._target: list[bytes] = []
        self._header_bytes = 0
        self._continue_owed = False

    def close(self) -> None:
        """Break the cycle between the parser and this reader, so both go when the
        connection does: a long connection's reader has aged into the oldest generation,
        which the cycle collector walks only rarely."""
        self._parser = None  # type: ignore[assignment]

    @property
    def busy(self) -> bool:
        """Part of a request has arrived."""
        return self._current is not None

    def feed(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self.upgrade = True
        except httptools.HttpParserCallbackError as error:
            if isinstance(error.__context__, WireError):
                raise error.__context__ from None
            raise WireError(400, f"malformed HTTP request ({error})", "bad_request") from None
        except httptools.HttpParserError as error:
            raise WireError(400, f"malformed HTTP request ({error})", "bad_request") from None

    def continue_owed(self) -> bool:
        """Whether the client waits for "100 Continue" before it sends the body (curl does
        for bodies over 1 KiB); true once per request."""
        owed, self._continue_owed = self._continue_owed, False
        return owed and self._current is not None and not self._current.received

    # -- httptools callbacks --------------------------------------------------------------
    def on_message_begin(self) -> None:
        self._current = Request()
        self._target = []
        self._header_bytes = 0

    def on_url(self, part: bytes) -> None:
        self._target.append(part)
        self._header_bytes += len(part)
        if self._header_bytes > MAX_TARGET:
            raise WireError(414, f"the request target is over {MAX_TARGET} bytes", "uri_too_long")

    def on_header(self, name: bytes, value: bytes) -> None:
        assert self._current is not None
        self._header_bytes += len(name) + len(value)
        if self._header_bytes > MAX_HEADERS:
            raise WireError(
                431, f"the request's headers are over {MAX_HEADERS} bytes", "headers_too_large"
            )
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        headers = self._current.headers
        headers[key] = f"{headers[key]}, {text}" if key in headers else text

    def on_headers_complete(self) -> None:
        request = self._current
        assert request is not None
        parser = self._parser
        request.method = parser.get_method().decode("latin-1")
        request.target = b"".join(self._target).decode("latin-1")
        request.version = parser.get_http_version()
        request.keep_alive = parser.should_keep_alive()
        headers = request.headers
        chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        if "content-length" in headers and not chunked:
            try:
                request.declared = int(headers["content-length"])
            except ValueError:
                request.declared = -1
            if request.declared < 0:
                raise WireError(400, "Content-Length is not a number", "invalid_header")
        request.length_known = chunked or request.declared is not None
        expects = headers.get("expect", "").lower() == "100-continue"
        oversized = request.declared is not None and request.declared > self.max_body
        # Refused before the body comes when the client waits to be told, or when reading
        # it away would take too long; otherwise read away and answered 413 after.
        if oversized and (expects or request.declared > DISCARD_MAX):
            raise too_large(request.declared, self.max_body)
        self._continue_owed = expects and request.version == "1.1"

    def on_body(self, chunk: bytes) -> None:
        request = self._current
        assert request is not None
        request.received += len(chunk)
        if request.received > self.max_body:
            request.chunks.clear()
            if request.received > DISCARD_MAX:  # a chunked body without end
                raise too_large(request.received, self.max_body)
        else:
            request.chunks.append(chunk)

    def on_message_complete(self) -> None:
        request = self._current
        assert request is not None
        if request.received > self.max_body:
            request.refused = too_large(request.received, self.max_body)
        self.complete.append(request)
        self._current = None


def too_large(size: int, limit: int) -> WireError:
    return WireError(
        413,
        f"the body is {size:,} bytes, over this server's limit of {limit:,} "
        "(split the request, or raise --max-body)",
        "request_too_large",
        kind="too_large",
    )


_PHRASES = {status.value: status.phrase for status in HTTPStatus}
_date_second = 0
_date_header = ""


def _date() -> str:
    """The Date header, formatted once a second."""
    global _date_second, _date_header
    now = int(time.time())
    if now != _date_second:
        _date_second, _date_header = now, formatdate(now, usegmt=True)
    return _date_header


def response(
    status: int,
    body: bytes,
    content_type: str,
    headers: dict[str, str],
    close: bool,
    keep_alive_header: bool = False,
    head_only: bool = False,
) -> bytes:
    """One answer, ready for a single send."""
    lines = [
        f"HTTP/1.1 {status} {_PHRASES.get(status, 'Unknown')}",
        "Server: npuctl-serve",
        f"Date: {_date()}",
        f"Content-Type: {content_type}",
        f"Content-Length: {len(body)}",
    ]
    lines.extend(f"{name}: {value}" for name, value in headers.items())
    if close:
        lines.append("Connection: close")
    elif keep_alive_header:  # an HTTP/1.0 client that asked to keep the connection
        lines.append("Connection: keep-alive")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return head if head_only else head + body
