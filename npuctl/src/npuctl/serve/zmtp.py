"""ZeroMQ's wire protocol (ZMTP 3.x with the NULL mechanism, RFC 23 and 37) as a REP peer
speaks it to REQ and DEALER peers, over TCP or a unix socket (ZeroMQ's tcp:// and ipc://):
the greeting, the READY handshake, multipart messages, PING and PONG. It knows no message's
meaning; a protocol (.protocols.frigate) reads requests and sends answers through it.

Why not libzmq: its sockets take an unfinished multipart message from a peer without any
bound (a ZMTP client that sends frames with the MORE flag and never a last one fills the
server's memory; measured: 900 MB from one unauthenticated TCP peer, with ZMQ_MAXMSGSIZE and
ZMQ_RCVHWM set), and they offer no limit on connections. Here every frame's size is checked
from its header before its bytes are read, against what the message so far allows, and a
large frame takes memory only as its bytes arrive, the large frames of every connection
bounded together (.LargeFrames: the slowest closed to make room); a message has at most a
few frames, one of them empty, and a few commands, and must arrive within its timeout; a
message over a limit is read away and answered while what it sends stays near what a message
may hold, and past that the connection is closed; a connection reads its next message only
once the last is answered, and an answer the peer does not take within its timeout closes it
(PONGs are dropped while an answer waits); and connections are counted per listener and per
address, as the HTTP side counts them (.connections.Budget), a peer not being answered
making room.

Routing envelopes (RFC 28): a REQ peer puts an empty delimiter before its message, a DEALER
behind a ROUTER/DEALER proxy one routing frame per hop and then the delimiter, a DEALER of
its own nothing; whatever came up to the delimiter is sent back before the answer."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import grp
import ipaddress
import os
import socket
import struct
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .connections import Budget, remove_stale_socket

GREETING_SIZE = 64
SIGNATURE_END = 9  # 0xFF, eight bytes of padding, 0x7F
MORE, LONG, COMMAND = 0x01, 0x02, 0x04
MAX_COMMAND = 64 * 1024  # bytes of a READY, PING or ERROR command
# Commands (PINGs) a peer may send within one message, and a second between messages: a
# heartbeat sends one an interval (ZMQ_HEARTBEAT_IVL), a flood is closed.
MAX_COMMANDS = 16
PING_CONTEXT = 16  # bytes of a PING's context a PONG echoes (RFC 37: at most 16)
# What the kernel keeps of the answers a peer has not read (it doubles it): an answer is a
# few hundred bytes, so this is plenty, and a peer that does not read pins no more (the
# kernel's own tuning would let it grow to megabytes a connection).
SEND_BUFFER = 64 * 1024
RESET_ON_CLOSE = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close sends RST, drops the rest
MAX_ROUTING_ID = 255  # bytes of a routing frame (RFC 28: a ZeroMQ identity)
MAX_HOPS = 8  # proxies a message may come through (RFC 28: a routing frame each)
# A large frame younger than this is never closed to make room for another: a peer sending
# at the network's pace finishes one well within it.
LARGE_FRAME_GRACE = 1.0
# The peers a REP socket talks to (RFC 28); each says which it is in its READY.
PEER_TYPES = (b"REQ", b"DEALER")


def greeting() -> bytes:
    """ZMTP 3.1, the NULL mechanism, as-server false (NULL has no roles)."""
    mechanism = b"NULL".ljust(20, b"\0")
    return b"\xff" + b"\0" * 8 + b"\x7f" + b"\x03\x01" + mechanism + b"\0" + b"\0" * 31


def frame(data: bytes | bytearray | memoryview, more: bool = False, command: bool = False) -> bytes:
    """A frame's header (the bytes follow it)."""
    flags = (MORE if more else 0) | (COMMAND if command else 0)
    if len(data) > 255:
        return struct.pack(">BQ", flags | LONG, len(data))
    return struct.pack(">BB", flags, len(data))


def ready_command(socket_type: bytes) -> bytes:
    name, value = b"Socket-Type", socket_type
    body = b"\x05READY" + bytes([len(name)]) + name + struct.pack(">I", len(value)) + value
    return frame(body, command=True) + body


def properties(body: bytes | bytearray) -> dict[bytes, bytes]:
    """A READY command's metadata (after its name)."""
    found: dict[bytes, bytes] = {}
    at = 0
    while at < len(body):
        size = body[at]
        name = body[at + 1 : at + 1 + size]
        at += 1 + size
        if at + 4 > len(body):
            raise ProtocolError("a READY property is cut short")
        (length,) = struct.unpack(">I", body[at : at + 4])
        found[bytes(name).lower()] = bytes(body[at + 4 : at + 4 + length])
        at += 4 + length
    if at != len(body):
        raise ProtocolError("a READY property is cut short")
    return found


class ProtocolError(Exception):
    """The peer does not speak ZMTP 3 with the NULL mechanism as a REQ or DEALER does, or is
    far past a limit: the connection is closed."""


class Refused(Exception):
    """A message over its limits, read away: its sender gets an answer saying why (after the
    routing envelope it sent, ``envelope``)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.envelope: list[Data] = []


def escaped(text: object, limit: int = 120) -> str:
    """A peer's text as one line of a log: what is not printable escaped, cut at ``limit``."""
    if isinstance(text, bytes | bytearray):
        text = bytes(text[: limit * 4]).decode("utf-8", "replace")
    plain = str(text)
    cut = plain[:limit]
    shown = "".join(c if c.isprintable() else repr(c)[1:-1] for c in cut)
    return shown + ("..." if len(plain) > limit else "")


def envelope_end(frames: list[Data]) -> int:
    """Where a message's body starts: after the first empty frame (the delimiter), or at 0
    when there is none (a DEALER of its own sends no envelope)."""
    for index, data in enumerate(frames):
        if not len(data):
            return index + 1
    return 0


@dataclass(frozen=True)
class Endpoint:
    """Where to listen: tcp://HOST:PORT (HOST * for every address) or ipc://PATH (@NAME for
    Linux's abstract namespace), as ZeroMQ writes endpoints."""

    text: str
    host: str | None = None
    port: int = 0
    path: str | None = None

    @classmethod
    def parse(cls, text: str) -> Endpoint:
        scheme, _, rest = text.partition("://")
        if scheme == "tcp":
            host, _, port = rest.rpartition(":")
            host = host.strip("[]")
            if not host or not port.isdigit() or not 0 <= int(port) <= 65535:
                raise ValueError(f"{text}: a tcp endpoint is tcp://HOST:PORT (HOST * for all)")
            return cls(text, None if host == "*" else host, int(port))
        if scheme == "ipc" and rest:
            return cls(text, path="\0" + rest[1:] if rest.startswith("@") else rest)
        raise ValueError(f"{text}: an endpoint is tcp://HOST:PORT or ipc://PATH")

    @property
    def loopback(self) -> bool:
        if self.path is not None:
            return True
        try:
            return self.host is not None and ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return self.host == "localhost"


@dataclass(eq=False)
class LargeFrames:
    """The large frames being received on every connection, their declared bytes at most
    ``limit`` together: a stalled or trickling peer cannot pin memory with frames it never
    finishes. A new one that does not fit closes the slowest (fewest bytes a second since
    it began) of those older than LARGE_FRAME_GRACE until it fits; when none may be closed,
    it is refused (read away and answered)."""

    limit: int
    held: dict[Connection, tuple[int, float]] = field(default_factory=dict)  # size, start

    def make_room(self, connection: Connection, size: int) -> bool:
        """Whether a large frame of ``size`` bytes fits, once slower ones are closed."""
        now = time.monotonic()
        used = sum(held for held, _ in self.held.values())
        if used + size <= self.limit:
            return True
        older = [c for c, (_, began) in self.held.items() if now - began >= LARGE_FRAME_GRACE]

        def pace(other: Connection) -> float:
            return other.received() / max(now - self.held[other][1], 1e-3)

        for slowest in sorted(older, key=pace):
            if used + size <= self.limit:
                break
            declared, began = self.held.pop(slowest)
            used -= declared
            slowest.drop(
                f"{slowest.received()} bytes of a {declared}-byte frame in {now - began:.0f} s: "
                "closed to make room for a faster frame"
            )
        return used + size <= self.limit

    def hold(self, connection: Connection, size: int) -> None:
        self.held[connection] = (size, time.monotonic())

    def release(self, connection: Connection) -> None:
        self.held.pop(connection, None)


class Connection(asyncio.BufferedProtocol):
    """The bytes of one connection, read straight into where they are wanted: small reads
    (frame heads, commands, headers) from a buffer of its own, and a large frame into its own
    bytes, which the kernel fills with no copy in between (a 1.2 MB camera frame costs what
    receiving it costs). Reading pauses while nobody waits for bytes and the buffer is full:
    what a peer sends ahead is bounded by the buffer."""

    SMALL = 64 * 1024

    def __init__(
        self,
        serve: Callable[[Connection], Coroutine[Any, Any, None]],
        large_frames: LargeFrames | None = None,
    ) -> None:
        self._serve = serve
        self.large_frames = large_frames or LargeFrames(1 << 62)
        self._buffer = bytearray(self.SMALL)
        self._start = self._end = 0  # the bytes received and not yet read
        self._target: memoryview | None = None  # a large read's own bytes
        self._filled = 0
        self._into_target = False  # where the bytes asked for last go
        self._wanted = 0  # bytes a small read waits for
        self._waiter: asyncio.Future[None] | None = None
        self._writable: asyncio.Future[None] | None = None
        self._closed: BaseException | None = None
        self._paused = False
        self.transport: asyncio.Transport | None = None
        self.task: asyncio.Task[None] | None = None

    # -- asyncio's side ----------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        connected = transport.get_extra_info("socket")
        with contextlib.suppress(OSError, AttributeError):
            connected.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)
        self.task = asyncio.get_running_loop().create_task(self._serve(self))

    def get_buffer(self, sizehint: int) -> memoryview:
        target = self._target
        self._into_target = target is not None and self._filled < len(target)
        if self._into_target:
            return target[self._filled :]  # type: ignore[index]
        if self._start == self._end:
            self._start = self._end = 0
        elif self._end == len(self._buffer):  # move what is left to the front
            left = self._end - self._start
            self._buffer[:left] = self._buffer[self._start : self._end]
            self._start, self._end = 0, left
        if self._end == len(self._buffer):  # full before reading paused: room, once more
            self._buffer.extend(bytes(self.SMALL))
        return memoryview(self._buffer)[self._end :]

    def buffer_updated(self, nbytes: int) -> None:
        if self._into_target:
            self._filled += nbytes
            if self._target is not None and self._filled == len(self._target):
                self._wake()
            return
        self._end += nbytes
        if self._end - self._start >= self._wanted:
            self._wake()
        if self._end - self._start >= self.SMALL and self.transport is not None:
            self.transport.pause_reading()  # enough ahead of the reader: it asks for more
            self._paused = True

    def eof_received(self) -> bool | None:
        self._fail(asyncio.IncompleteReadError(b"", None))
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(exc or ConnectionResetError("the peer closed the connection"))
        if self._writable is not None and not self._writable.done():
            self._writable.set_exception(ConnectionResetError("closed"))
        if self.task is not None and not self.task.done():
            self.task.cancel()  # its request, if any, with it

    def pause_writing(self) -> None:
        self._writable = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)
        self._writable = None

    # -- the reader's side -------------------------------------------------------------------
    async def readexactly(self, size: int) -> bytes:
        """``size`` bytes (at most SMALL); IncompleteReadError or ConnectionError when the
        peer goes."""
        assert size <= self.SMALL
        while self._end - self._start < size:
            await self._wait(size)
        data = bytes(self._buffer[self._start : self._start + size])
        self._start += size
        return data

    async def read_frame(self, size: int) -> Data:
        """A frame's ``size`` bytes: a small one as bytes, a large one in memory of its own."""
        if size <= self.SMALL:
            return await self.readexactly(size)
        # calloc's memory (numpy's zeros): pages that are fresh stay untouched until written,
        # so a frame declared large and sent slowly costs what has arrived, not what its
        # header says; memory freed by earlier frames is taken again without page faults. The
        # bytes of all the large frames being received are bounded together (.LargeFrames).
        whole = np.zeros(size, dtype=np.uint8).data
        self.large_frames.hold(self, size)
        try:
            have = min(self._end - self._start, size)
            whole[:have] = self._buffer[self._start : self._start + have]
            self._start += have
            self._filled = have
            if have < size:
                self._target = whole
                try:
                    await self._wait(0)
                finally:
                    self._target = None
        except BaseException:
            del whole  # its memory goes now, not with the traceback that holds this frame
            raise
        finally:
            self.large_frames.release(self)
        return whole

    def received(self) -> int:
        """Bytes of the large frame being received that have arrived."""
        return self._filled

    def drop(self, why: str) -> None:
        """Closed to make room for another connection's large frame."""
        self._fail(ProtocolError(why))
        self.close()

    async def skip(self, size: int) -> None:
        """Read ``size`` bytes away, a buffer at a time (never all of them at once)."""
        while size:
            if self._start == self._end:
                await self._wait(1)
            taken = min(size, self._end - self._start)
            self._start += taken
            size -= taken

    async def _wait(self, wanted: int) -> None:
        if self._closed is not None:
            raise copy.copy(self._closed)
        self._wanted = wanted
        self._waiter = asyncio.get_running_loop().create_future()
        if self._paused and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _fail(self, error: BaseException) -> None:
        # The error kept is never the one raised: a raised one takes the reader's frames
        # along in its traceback (and the frame's pages with them) for as long as it is kept.
        self._closed = self._closed or error
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(copy.copy(self._closed))

    # -- writing ---------------------------------------------------------------------------
    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def pending(self) -> bool:
        """Whether written bytes wait for the peer to read them."""
        return self.transport is not None and (
            self._writable is not None or self.transport.get_write_buffer_size() > 0
        )

    async def drain(self) -> None:
        if self._closed is not None and not isinstance(self._closed, asyncio.IncompleteReadError):
            raise copy.copy(self._closed)
        if self._writable is not None:
            await self._writable

    def close(self) -> None:
        """Closed at once: what the peer has not read is dropped, not kept for it (a reset,
        so that not even the kernel keeps it for a peer that does not read)."""
        if self.transport is None:
            return
        if self.transport.get_write_buffer_size():
            connected = self.transport.get_extra_info("socket")
            with contextlib.suppress(OSError, AttributeError):
                connected.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, RESET_ON_CLOSE)
            self.transport.abort()
        else:
            self.transport.close()

    def peer(self) -> str:
        address = self.transport.get_extra_info("peername") if self.transport else None
        return address[0] if isinstance(address, tuple) else "unix"


@dataclass(frozen=True)
class PeerLimits:
    handshake_timeout: float  # seconds for the greeting and READY
    message_timeout: float  # seconds for a message, once its first byte has come
    max_frames: int  # frames in one message, its routing envelope's included
    send_timeout: float  # seconds the peer has to take an answer
    # Bytes of a refused message read away so that it can be answered; past them, or past
    # max_frames, the connection is closed instead.
    max_read_away: int
    # The large frames of every connection, bounded together (None: unbounded, a test's).
    large_frames: LargeFrames | None = None


Data = bytes | bytearray | memoryview  # a frame as received (a large one in memory of its own)
# A message's limit for its next frame: given the frames so far, at most this many bytes.
FrameLimit = Callable[[list[Data]], int]


@dataclass(eq=False)
class Peer:
    """One connection to a REQ or DEALER peer."""

    connection: Connection
    limits: PeerLimits
    client: str  # its address ("unix" on a unix socket)
    # A whole message is being answered: never evicted. A peer idle, sending a message or
    # not taking its answer may be, the one longest so first.
    in_request: bool = False
    since: float = field(default_factory=time.monotonic)  # when it last went unserved
    peer_type: bytes = b""
    _second: float = 0.0  # when the second the commands between messages are counted in began
    _commands: int = 0
    evicted: bool = False

    async def handshake(self) -> None:
        async with asyncio.timeout(self.limits.handshake_timeout):
            self.connection.write(greeting())
            theirs = await self.connection.readexactly(GREETING_SIZE)
            if theirs[0] != 0xFF or theirs[SIGNATURE_END] != 0x7F:
                raise ProtocolError("not a ZMTP peer (its greeting's signature is wrong)")
            if theirs[10] < 3:
                raise ProtocolError(f"ZMTP {theirs[10]}.x: this server speaks ZMTP 3")
            if theirs[12:32].rstrip(b"\0") != b"NULL":
                mechanism = escaped(theirs[12:32].rstrip(b"\0"), 20)
                raise ProtocolError(f"the {mechanism} mechanism: this server speaks NULL")
            self.connection.write(ready_command(b"REP"))
            body = await self._command()
            if not body.startswith(b"\x05READY"):
                raise ProtocolError("no READY after the greeting")
            self.peer_type = properties(body[6:]).get(b"socket-type", b"")
            if self.peer_type not in PEER_TYPES:
                raise ProtocolError(f"a {escaped(self.peer_type, 40)} socket, not REQ or DEALER")

    async def _command(self) -> bytes:
        flags, size = await self._frame_head()
        if not flags & COMMAND or size > MAX_COMMAND:
            raise ProtocolError("a command frame was expected")
        return await self.connection.readexactly(size)

    async def _frame_head(self, flags: int | None = None) -> tuple[int, int]:
        if flags is None:
            flags = (await self.connection.readexactly(1))[0]
        if flags & LONG:
            (size,) = struct.unpack(">Q", await self.connection.readexactly(8))
        else:
            size = (await self.connection.readexactly(1))[0]
        return flags, size

    async def message(self, limit: FrameLimit) -> list[Data]:
        """The next message's frames (PINGs answered meanwhile). It waits as long as the peer
        idles; once the first byte has come, the whole message must come within the timeout.
        Refused, with the message read away, when a frame is over its limit; ProtocolError
        (the connection ends) when even that takes too long or would read far more than a
        message may hold, a second empty frame comes, or too many frames or commands."""
        try:
            while (first := (await self.connection.readexactly(1))[0]) & COMMAND:
                async with asyncio.timeout(self.limits.message_timeout):
                    await self._command_between_messages(first)
            self.since = time.monotonic()
            async with asyncio.timeout(self.limits.message_timeout):
                frames = await self._frames(limit, first)
        except TimeoutError:
            raise ProtocolError("a message took too long to arrive") from None
        self.in_request = True
        return frames

    async def _frames(self, limit: FrameLimit, first: int | None) -> list[Data]:
        frames: list[Data] = []
        refusal: Refused | None = None
        count = commands = 0
        empty = False
        read_away = 0
        limits = self.limits
        while True:
            flags, size = await self._frame_head(first)
            first = None
            if flags & COMMAND:
                commands += 1
                if commands > MAX_COMMANDS:
                    raise ProtocolError(f"more than {MAX_COMMANDS} commands within a message")
                await self._answer_command(size)
                continue
            count += 1
            if count > limits.max_frames:
                raise ProtocolError(f"more than {limits.max_frames} frames in a message")
            if not size:
                if empty:
                    raise ProtocolError("a second empty frame in a message")
                empty = True
            if refusal is None:
                refusal = self._refusal(frames, count, size, limit)
            if refusal is None:
                frames.append(await self.connection.read_frame(size))
            else:
                read_away += size
                if read_away > limits.max_read_away:
                    raise ProtocolError(
                        f"a message of over {limits.max_read_away} bytes, far past its limit"
                    )
                await self.connection.skip(size)
            if not flags & MORE:
                break
        if refusal is not None:
            raise refusal
        _check_envelope(frames[: envelope_end(frames)])
        return frames

    def _refusal(
        self, frames: list[Data], count: int, size: int, limit: FrameLimit
    ) -> Refused | None:
        """Why the frame of ``size`` bytes coming is read away, not kept (None: it is kept)."""
        refusal = None
        if size > (allowed := limit(frames)):
            refusal = Refused("too_large", f"frame {count} has {size} bytes, over {allowed}")
        elif size > Connection.SMALL and not self.connection.large_frames.make_room(
            self.connection, size
        ):
            refusal = Refused(
                "busy", f"frame {count} has {size} bytes: no room for it now, send it again"
            )
        if refusal is not None:
            refusal.envelope = frames[: envelope_end(frames)]
        return refusal

    async def _command_between_messages(self, flags: int) -> None:
        now = time.monotonic()
        if now - self._second >= 1.0:
            self._second, self._commands = now, 0
        self._commands += 1
        if self._commands > MAX_COMMANDS:
            raise ProtocolError(f"more than {MAX_COMMANDS} commands a second")
        _, size = await self._frame_head(flags)
        await self._answer_command(size)

    async def _answer_command(self, size: int) -> None:
        if size > MAX_COMMAND:
            raise ProtocolError("a command over its limit")
        body = await self.connection.readexactly(size)
        if body.startswith(b"\x04PING") and len(body) >= 7:
            if self.connection.pending():
                return  # it has not read what it was sent: no more is queued for it
            context = body[7 : 7 + PING_CONTEXT]
            pong = b"\x04PONG" + context
            self.connection.write(frame(pong, command=True) + pong)
        elif body.startswith(b"\x05ERROR"):
            raise ProtocolError("the peer sent ERROR")

    async def send(self, frames: list[Data | memoryview]) -> None:
        """A message, each frame but the last marked MORE; the next may then be read once
        the peer has taken it. ProtocolError when it does not within the send timeout
        (meanwhile it may be evicted to make room)."""
        for index, data in enumerate(frames):
            view = memoryview(data)
            self.connection.write(frame(view, more=index < len(frames) - 1))
            self.connection.write(view)
        self.in_request = False
        self.since = time.monotonic()
        try:
            async with asyncio.timeout(self.limits.send_timeout):
                await self.connection.drain()
        except TimeoutError:
            raise ProtocolError(
                f"it took no answer for {self.limits.send_timeout:g} s (it does not read)"
            ) from None

    def evict(self) -> None:
        """Closed to make room: it was idle, still sending a message or not reading."""
        self.evicted = True
        self.connection.close()


def _check_envelope(envelope: list[Data]) -> None:
    """A routing envelope (its delimiter last) as RFC 28 has it, else the connection ends."""
    if len(envelope) > MAX_HOPS + 1 or any(len(hop) > MAX_ROUTING_ID for hop in envelope):
        raise ProtocolError(
            f"a routing envelope of more than {MAX_HOPS} hops or of identities over "
            f"{MAX_ROUTING_ID} bytes (RFC 28)"
        )


Handler = Callable[[Peer], Awaitable[None]]


@dataclass
class Listening:
    server: asyncio.Server
    endpoint: Endpoint
    peers: set[asyncio.Task[Any]] = field(default_factory=set)

    def where(self) -> str:
        if self.endpoint.path is not None:
            return self.endpoint.text
        found = []
        for listener in self.server.sockets:  # tcp://* is one a family: IPv4 and IPv6 both
            host, port = listener.getsockname()[:2]
            found.append(f"tcp://{'[' + host + ']' if ':' in host else host}:{port}")
        return " and ".join(found)

    async def close(self) -> None:
        self.server.close()
        for task in list(self.peers):
            task.cancel()
        await asyncio.gather(*self.peers, return_exceptions=True)
        if self.endpoint.path is not None and not self.endpoint.path.startswith("\0"):
            Path(self.endpoint.path).unlink(missing_ok=True)


async def listen(
    endpoint: Endpoint,
    serve_peer: Handler,
    limits: PeerLimits,
    budget: Budget,
    allowed: Callable[[str], bool],
    refused: Callable[[str, str], None],
    group: str | None = None,
) -> Listening:
    """Accept REQ and DEALER peers at ``endpoint``; each is served by ``serve_peer`` once its
    handshake is done. A peer ``allowed`` refuses, or one over the budget when every other
    is busy, is closed at once (``refused`` is told who and why). A named unix socket is
    read-write for its owner and ``group`` (else the server's own group), nobody else."""
    listening: Listening | None = None

    async def accepted(connection: Connection) -> None:
        assert listening is not None
        client = connection.peer()
        peer = Peer(connection, limits, client)
        if not allowed(client):
            refused(client, "not in the allowed addresses")
            connection.close()
            return
        if not budget.admit(peer):
            refused(client, "too many connections")
            connection.close()
            return
        task = asyncio.current_task()
        assert task is not None
        listening.peers.add(task)
        try:
            await peer.handshake()
            await serve_peer(peer)
        except (ProtocolError, TimeoutError) as error:
            refused(client, str(error))
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            if peer.evicted:
                refused(client, "evicted to make room for a new connection")
            # else the peer left: its request, if any, is cancelled with this task
        except Exception as error:  # a bug: this peer's connection, never the server
            refused(client, f"closed on an unexpected {type(error).__name__}: {escaped(error)}")
        finally:
            listening.peers.discard(task)
            budget.leave(peer)
            connection.close()

    loop = asyncio.get_running_loop()
    if endpoint.path is not None:
        named = not endpoint.path.startswith("\0")
        unbound = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            if named:
                make_folders(Path(endpoint.path).parent)
                remove_stale_socket(Path(endpoint.path))
                # Linux makes the socket's file with the mode its descriptor has when bound
                # (less the umask): never, not even for an instant, more than 0660.
                os.fchmod(unbound.fileno(), 0o660)
            unbound.bind(endpoint.path)
        except OSError:
            unbound.close()
            raise
        server = await loop.create_unix_server(
            lambda: Connection(accepted, limits.large_frames), sock=unbound
        )
        if named:
            socket_for_group(Path(endpoint.path), group)
    else:
        server = await loop.create_server(
            lambda: Connection(accepted, limits.large_frames),
            endpoint.host,
            endpoint.port,
            reuse_address=True,
        )
    listening = Listening(server, endpoint)
    return listening


def make_folders(folder: Path) -> None:
    """The socket's folder and those above it that are missing, each 0755 whatever the
    umask (Path.mkdir gives the folders above the last the umask's mode)."""
    missing = []
    while not folder.exists():
        missing.append(folder)
        folder = folder.parent
    for each in reversed(missing):
        with contextlib.suppress(FileExistsError):
            each.mkdir(mode=0o755)
            each.chmod(0o755)


def socket_for_group(path: Path, group: str | None) -> None:
    """The socket read-write for its owner and ``group`` only (the group that may use the
    NPU may ask it for frames too); where this process may not give it to that group (not
    root nor a member, or no such group here), its own group keeps it."""
    path.chmod(0o660)
    if group is None:
        return
    with contextlib.suppress(KeyError, PermissionError):
        os.chown(path, -1, grp.getgrnam(group).gr_gid)
