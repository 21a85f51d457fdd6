"""What a connection may cost before aiohttp reads it: aiohttp bounds each header line while it
arrives, but not a head's total size, nor the time a client takes to send it, nor how many
connections a listener or one address holds. The guard is an asyncio protocol in front of
aiohttp's that watches only that, and writes no HTTP itself:

- a request's head is held back until it is whole (at most ``max_head`` bytes, its line at
  most ``max_target``), then handed to aiohttp with what follows it; the body and pipelined
  requests pass straight through;
- a head that grows past its limit, or is not whole after ``head_timeout``, is not handed on:
  aiohttp is given a request of the guard's own instead (the same path, or a path no route
  serves, and ``Connection: close``) and the guard's refusal (414, 431, 408) is the answer the
  application gives it, in the shape of the API that path belongs to;
- connections are counted per listener (the unix socket has its own, so no TCP client can
  take the probes' capacity) and per client address. At a limit, a new connection takes the
  place of the oldest one that is idle between requests or still sending its head: those are
  not being served, and a slow or half-open client must never keep a probe out. Only when
  every connection is inside a request is the newcomer refused (503 with Retry-After, to the
  request it sends within ``REFUSED_HEAD_SECONDS``; one that sends none is closed)."""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import re
import socket
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from .limits import Limits
from .metrics import Metrics

HEAD_END = b"\r\n\r\n"
# A refused connection's client has this long to send its request, which is then answered.
REFUSED_HEAD_SECONDS = 1.0
# A request line whose target may be repeated in the guard's own request.
_REQUEST_LINE = re.compile(rb"([A-Z]{1,16}) (/[\x21-\x7e]{0,1024}) HTTP/1\.[01]\r\n")
UNSERVED_PATH = "/.refused"
OWN_REQUEST_HEAD = b" HTTP/1.1\r\nHost: npuctl-serve\r\nConnection: close\r\n\r\n"


@dataclass(frozen=True)
class Refusal:
    """Why the guard refused a connection: the application answers its request with it."""

    status: int
    code: str
    message: str
    retry_after: int | None = None


class Connection(Protocol):
    """What a budget counts of a connection (an HTTP one's guard, a ZeroMQ peer)."""

    client: str  # its address
    in_request: bool  # being served: never evicted
    since: float  # when it last became unserved

    def evict(self) -> None: ...


@functools.lru_cache(maxsize=4096)
def client_key(client: str) -> str:
    """What connections are counted under as one client: an IPv4 address (an IPv4-mapped
    IPv6 one as that IPv4 address), an IPv6 address's /64 (the least a host is given, so one
    host cannot take a fresh address for each connection), any other name as itself."""
    try:
        address = ipaddress.ip_address(client.partition("%")[0])
    except ValueError:
        return client
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.ip_network(f"{address}/64", strict=False))
    return str(address)


@dataclass
class Budget:
    """The connections of one listener: at most ``limit`` in all and ``per_client`` from one
    address."""

    limit: int
    per_client: int
    open: list[Connection] = field(default_factory=list)

    def admit(self, newcomer: Connection) -> bool:
        """Whether ``newcomer`` may stay; makes room by closing an unserved connection."""
        key = client_key(newcomer.client)
        same = [g for g in self.open if client_key(g.client) == key]
        for crowd, limit in ((same, self.per_client), (self.open, self.limit)):
            if len(crowd) >= limit:
                idle = [g for g in crowd if not g.in_request]
                if not idle:
                    return False
                min(idle, key=lambda g: g.since).evict()
        self.open.append(newcomer)
        return True

    def leave(self, connection: Connection) -> None:
        if connection in self.open:
            self.open.remove(connection)


class Guard(asyncio.Protocol):
    """One connection: holds each head back until it is whole, then hands it to aiohttp."""

    def __init__(
        self,
        inner: asyncio.Protocol,
        budget: Budget,
        limits: Limits,
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
        self.refusal: Refusal | None = None  # what the application answers instead
        self.since = time.monotonic()  # when this connection last became unserved
        self._held = bytearray()  # the head so far, not yet handed on
        self._line_end = -1  # where its request line ends, once known
        # A head is due by the deadline. The timer is not moved at every request (a timer
        # costs more than the rest of the watch): it fires at an earlier deadline, finds the
        # later one and waits again.
        self._deadline: float | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._linger: asyncio.TimerHandle | None = None  # heads watched again after it
        self._deaf = False  # nothing more is handed on: a refusal was, or the connection ends
        self._closed = False
        self._ignored = 0  # bytes read and dropped since the connection went deaf

    # -- asyncio.Protocol ------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        self.client = peer[0] if isinstance(peer, tuple) else "unix"
        self.registry[transport] = self
        self.inner.connection_made(transport)
        if not self.budget.admit(self):
            self.metrics.errors.labels("busy").inc()
            self.refusal = Refusal(
                503, "busy", "too many open connections: retry later", retry_after=1
            )
            self._deadline = self.loop.time() + REFUSED_HEAD_SECONDS
            self._timer = self.loop.call_at(self._deadline, self._expire)
            return
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self._deaf:
            # Read away while the answer is made, but no further than a head's worth: a
            # client pushing on after its refusal waits on the kernel's buffers instead.
            self._ignored += len(data)
            if self._ignored > self.limits.max_head and self.transport is not None:
                self.transport.pause_reading()
            return
        if self.in_request:
            self.inner.data_received(data)
            return
        self._watch(data)

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
        self._line_end = -1
        self._disarm()

    def request_finished(self, body_read: bool = True) -> None:
        """The answer is made. A body not read to its end is read away by aiohttp for up to
        ``linger`` seconds (so the client reads the answer, not a reset): those bytes are
        no head, and heads are watched again only after that."""
        if self._deaf:  # a request of the guard's own: the connection closes with the answer
            return
        if not body_read:
            self._disarm()
            self._linger = self.loop.call_later(self.limits.linger + 1, self.request_finished)
            return
        self.in_request = False
        self.handler = None
        self.since = time.monotonic()
        self._arm()

    def evict(self) -> None:
        """Closed to make room: it was idle or had not finished its head."""
        self.metrics.errors.labels("evicted").inc()
        self._close()

    # -- heads -----------------------------------------------------------------------------
    def _watch(self, data: bytes) -> None:
        """Hold the head back until it is whole; hand it on with what follows it."""
        limits = self.limits
        if not self._held:
            if self._deadline is None:
                self._arm()
            end = data.find(HEAD_END)
            if 0 <= end <= limits.max_head - len(HEAD_END) and data.find(b"\r\n") <= (
                limits.max_target
            ):
                self.request_started()  # the usual case: a whole head in one chunk
                self.inner.data_received(data)
                return
        searched = len(self._held)
        self._held += data
        if self._line_end < 0:
            found = self._held.find(b"\r\n", max(0, searched - 1))
            if found >= 0:
                self._line_end = found
        if (len(self._held) if self._line_end < 0 else self._line_end) > limits.max_target:
            self._refuse(414, "uri_too_long", f"the request line is over {limits.max_target} bytes")
            return
        end = self._held.find(HEAD_END, max(0, searched - len(HEAD_END) + 1))
        if (len(self._held) if end < 0 else end + len(HEAD_END)) > limits.max_head:
            self._refuse(
                431, "headers_too_large", f"the request's head is over {limits.max_head} bytes"
            )
        elif end >= 0:
            held, self._held = bytes(self._held), bytearray()
            # The rest is the body, or a pipelined request aiohttp takes in turn.
            self.request_started()
            self.inner.data_received(held)

    def _refuse(self, status: int, code: str, message: str) -> None:
        """Answer with ``status`` (or the refusal the connection had already) to a request of
        the guard's own: its client's request line where it was whole and plain, else a path
        no route serves."""
        self.metrics.errors.labels("slow_client" if status == 408 else "too_large").inc()
        self.refusal = self.refusal or Refusal(status, code, message)
        found = _REQUEST_LINE.match(self._held)
        method, target = (found.group(1), found.group(2)) if found else (b"GET", b"")
        if method == b"HEAD" or not target:
            method, target = b"GET", UNSERVED_PATH.encode()
        self._held, self._line_end = bytearray(), -1
        self._deaf = True
        self.request_started()
        self.inner.data_received(method + b" " + target + OWN_REQUEST_HEAD)

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
        self._deadline = None
        if self._held:  # an idle keep-alive connection, or a refused one that sent nothing, ends
            self._refuse(
                408,
                "request_timeout",
                f"the request's head took over {self.limits.head_timeout:g} s to arrive",
            )
        else:
            self._close()

    def _close(self) -> None:
        self._stop_timers()
        self._deaf = True
        if self.transport is not None:
            self.transport.close()


def remove_stale_socket(path: Path) -> None:
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
