"""What a connection may cost before it has sent a whole request head, in front of aiohttp's
own protocol: the head's bytes (an endless header is cut at the limit with 431, counted as
the bytes arrive, so the cost is linear), the time to send it (a slow client is closed after
the head timeout, apart from the body's own timeout), and the connections themselves.

Connections are counted per listener (the unix socket has its own, so no TCP client can take
the probes' capacity) and per client address. At a limit, a new connection takes the place of
the oldest one that is idle between requests or still sending its head: those are not being
served, and a slow or half-open client must never keep a probe out. Only when every
connection is inside a request is the newcomer answered 503 with Retry-After.

aiohttp parses; this only watches the bytes go by until the blank line that ends a head."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .metrics import Metrics

HEAD_END = b"\r\n\r\n"


@dataclass(frozen=True)
class HeadLimits:
    max_target: int = 8 * 1024  # bytes of the request line
    max_head: int = 64 * 1024  # bytes of the request line and all headers
    head_timeout: float = 10.0  # seconds to send a whole head, and to idle between requests
    linger: float = 2.0  # seconds a body answered before it was read may still be read away


def _answer(status: int, reason: str, code: str, message: str, extra: str = "") -> bytes:
    """An answer before any route is known: in the OpenAI shape, the most common client's."""
    body = json.dumps(
        {
            "error": {
                "message": message,
                "type": "server_error" if status >= 500 else "invalid_request_error",
                "param": None,
                "code": code,
            }
        }
    ).encode()
    return (
        f"HTTP/1.1 {status} {reason}\r\nServer: npuctl-serve\r\nContent-Type: application/json"
        f"\r\nContent-Length: {len(body)}\r\n{extra}Connection: close\r\n\r\n"
    ).encode() + body


@dataclass
class Budget:
    """The connections of one listener: at most ``limit`` in all and ``per_client`` from one
    address."""

    limit: int
    per_client: int
    open: list[Guard] = field(default_factory=list)

    def admit(self, newcomer: Guard) -> bool:
        """Whether ``newcomer`` may stay; makes room by closing an unserved connection."""
        same = [g for g in self.open if g.client == newcomer.client]
        for crowd, limit in ((same, self.per_client), (self.open, self.limit)):
            if len(crowd) >= limit:
                idle = [g for g in crowd if not g.in_request]
                if not idle:
                    return False
                min(idle, key=lambda g: g.since).evict()
        self.open.append(newcomer)
        return True

    def leave(self, guard: Guard) -> None:
        if guard in self.open:
            self.open.remove(guard)


class Guard(asyncio.Protocol):
    """One connection: watches its heads, then hands every byte to aiohttp's protocol."""

    def __init__(
        self,
        inner: asyncio.Protocol,
        budget: Budget,
        limits: HeadLimits,
        metrics: Metrics,
        registry: dict[Any, Guard],
    ) -> None:
        self.inner = inner
        self.budget = budget
        self.limits = limits
        self.metrics = metrics
        self.registry = registry
        # Each get_running_loop() asks the kernel for the process id: once per connection.
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.client = ""
        self.in_request = False  # a whole head has arrived and its answer is not yet sent
        self.handler: asyncio.Task[Any] | None = None  # the task answering the request
        self.since = time.monotonic()  # when this connection last became unserved
        self._head = 0  # bytes of the head being received
        self._line_done = False
        self._tail = b""  # the last bytes of the previous chunk: a head end can straddle two
        # A head is due by the deadline. The timer is not moved at every request (a timer
        # costs more than the rest of the watch): it fires at an earlier deadline, finds the
        # later one and waits again.
        self._deadline: float | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._linger: asyncio.TimerHandle | None = None  # heads watched again after it
        self._closed = False

    # -- asyncio.Protocol ------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        self.client = peer[0] if isinstance(peer, tuple) else "unix"
        if not self.budget.admit(self):
            self.metrics.errors.labels("busy").inc()
            self._refuse()
            return
        self.registry[transport] = self
        self.inner.connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self._closed:
            return
        if not self.in_request and not self._watch(data):
            return
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        """The client closed its side: it reads no answer, so the connection ends, and with
        it the request in flight (its inputs are skipped by the NPU)."""
        if not self._closed:
            self.inner.eof_received()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        if self.handler is not None and not self.handler.done():
            # Its client is gone: the request ends (aiohttp 3.8 would let it run on), and
            # the inputs it queued are skipped by the NPU.
            self.handler.cancel()
        self._stop_timers()
        self.budget.leave(self)
        if self.transport is not None:
            self.registry.pop(self.transport, None)
        if not self._closed:
            self._closed = True
            self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()

    # -- what the application tells --------------------------------------------------------
    def request_started(self) -> None:
        self.in_request = True
        self._disarm()

    def request_finished(self, body_read: bool = True) -> None:
        """The answer is made. A body not read to its end is read away by aiohttp for up to
        ``linger`` seconds (so the client reads the answer, not a reset): those bytes are
        no head, and heads are watched again only after that."""
        if not body_read:
            self._disarm()
            self._linger = self.loop.call_later(self.limits.linger + 1, self.request_finished)
            return
        self.in_request = False
        self.handler = None
        self.since = time.monotonic()
        self._head, self._line_done, self._tail = 0, False, b""
        self._arm()

    def evict(self) -> None:
        """Closed to make room: it was idle or had not finished its head."""
        self.metrics.errors.labels("evicted").inc()
        self._close()

    # -- heads -----------------------------------------------------------------------------
    def _watch(self, data: bytes) -> bool:
        """Count a head's bytes; False when the connection was closed for them."""
        if self._head == 0 and self._deadline is None:
            self._arm()
        window = self._tail + data
        end = window.find(HEAD_END)
        counted = len(data) if end < 0 else max(0, end + len(HEAD_END) - len(self._tail))
        self._head += counted
        if not self._line_done:
            line_end = window.find(b"\r\n")
            line = self._head if line_end < 0 else line_end
            if line > self.limits.max_target:
                self._reject(
                    414,
                    "URI Too Long",
                    "uri_too_long",
                    f"the request line is over {self.limits.max_target} bytes",
                )
                return False
            self._line_done = line_end >= 0
        if self._head > self.limits.max_head:
            self._reject(
                431,
                "Request Header Fields Too Large",
                "headers_too_large",
                f"the request's head is over {self.limits.max_head} bytes",
            )
            return False
        if end >= 0:
            # The rest of this chunk is the body, or a pipelined request aiohttp takes in turn.
            self.request_started()
        else:
            self._tail = window[-(len(HEAD_END) - 1) :]
        return True

    def _arm(self) -> None:
        self._disarm()
        self._deadline = self.loop.time() + self.limits.head_timeout
        if self._timer is None:
            self._timer = self.loop.call_at(self._deadline, self._expire)

    def _disarm(self) -> None:
        self._deadline = None
        if self._linger is not None:
            self._linger.cancel()
            self._linger = None

    def _stop_timers(self) -> None:
        self._disarm()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expire(self) -> None:
        self._timer = None
        if self._deadline is None:
            return
        if self.loop.time() < self._deadline:  # re-armed since this timer was set
            self._timer = self.loop.call_at(self._deadline, self._expire)
            return
        self._too_slow()

    def _too_slow(self) -> None:
        self._deadline = None
        if self._head:  # an idle keep-alive connection just ends
            self.metrics.errors.labels("slow_client").inc()
            self._reject(
                408,
                "Request Timeout",
                "request_timeout",
                f"the request's head took over {self.limits.head_timeout:g} s to arrive",
            )
        else:
            self._close()

    def _reject(self, status: int, reason: str, code: str, message: str) -> None:
        if status != 408:
            self.metrics.errors.labels("too_large").inc()
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(_answer(status, reason, code, message))
        self._close()

    def _refuse(self) -> None:
        """Over the limit with every connection busy: a whole 503, then close without a reset
        (the client's request may be unread: close once it has sent it, or after a second)."""
        assert self.transport is not None
        self._closed = True
        self.transport.write(
            _answer(
                503,
                "Service Unavailable",
                "busy",
                "too many open connections: retry later",
                "Retry-After: 1\r\n",
            )
        )
        with_eof: Callable[[], bool] = getattr(self.transport, "can_write_eof", lambda: False)
        if with_eof():
            self.transport.write_eof()
        self.loop.call_later(1.0, self.transport.close)

    def _close(self) -> None:
        self._stop_timers()
        if self.transport is not None:
            self.transport.close()
