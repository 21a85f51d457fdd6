"""A ZMTP 3 peer written by hand, as an attacker writes one: its greeting and READY, frames
with any flags and sizes, commands, and whatever it chooses not to read. Frames are sent
with 8-byte sizes unless asked otherwise; answers are read frame by frame."""

from __future__ import annotations

import re
import socket
import struct
import time
from pathlib import Path

MORE, LONG, COMMAND = 0x01, 0x02, 0x04
TCP_ESTABLISHED = 1  # tcp_info's first byte, the connection's state
GREETING = b"\xff" + b"\0" * 8 + b"\x7f\x03\x01NULL" + b"\0" * 16 + b"\0" * 32


def ready(socket_type: bytes) -> bytes:
    body = b"\x05READY\x0bSocket-Type" + struct.pack(">I", len(socket_type)) + socket_type
    return command(body)


def command(body: bytes) -> bytes:
    if len(body) > 255:
        return struct.pack(">BQ", COMMAND | LONG, len(body)) + body
    return bytes([COMMAND, len(body)]) + body


def ping(context: bytes = b"") -> bytes:
    return command(b"\x04PING\x00\x00" + context)


def raw_peer(
    port: int,
    expect_reply: bool = True,
    socket_type: bytes = b"DEALER",
    source: str | None = None,
    receive_buffer: int | None = None,
) -> socket.socket:
    """A peer past the handshake (a DEALER by default: no envelope), from ``source``; with
    ``receive_buffer`` the kernel keeps at most about that much of what it does not read."""
    peer = socket.socket()
    peer.settimeout(10)
    if receive_buffer:
        peer.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    if source:
        peer.bind((source, 0))
    peer.connect(("127.0.0.1", port))
    peer.sendall(GREETING + ready(socket_type))
    received = b""
    while len(received) < 64 + 27:  # its greeting and its READY (REP, ROUTER: as long)
        chunk = peer.recv(4096)
        assert chunk, "closed during the handshake"
        received += chunk
    assert received[:1] == b"\xff"
    assert b"REP" in received or not expect_reply
    return peer


def frames_bytes(*frames: bytes) -> bytes:
    out = b""
    for index, data in enumerate(frames):
        more = MORE if index < len(frames) - 1 else 0
        out += struct.pack(">BQ", more | LONG, len(data)) + data
    return out


def send_frames(peer: socket.socket, *frames: bytes) -> None:
    peer.sendall(frames_bytes(*frames))


def message_of(peer: socket.socket) -> list[bytes]:
    """The next message's frames (commands skipped)."""
    frames: list[bytes] = []
    while True:
        flags = recv_exactly(peer, 1)[0]
        size = (
            struct.unpack(">Q", recv_exactly(peer, 8))[0]
            if flags & LONG
            else recv_exactly(peer, 1)[0]
        )
        data = recv_exactly(peer, size)
        if flags & COMMAND:
            continue
        frames.append(data)
        if not flags & MORE:
            return frames


def answer_of(peer: socket.socket) -> bytes:
    """The last frame of the next message (the answer after any envelope)."""
    return message_of(peer)[-1]


def recv_exactly(peer: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = peer.recv(size - len(data))
        assert chunk, "closed"
        data += chunk
    return data


def closed(peer: socket.socket) -> bool:
    """Whether the server has closed the connection (what it sent before is read away)."""
    try:
        while chunk := peer.recv(65536):
            del chunk
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
    return True


def server_closed(peer: socket.socket, within: float = 30.0) -> bool:
    """Whether the server closes the connection within ``within`` seconds, seen from the
    TCP state alone: nothing is read (reading would let a server that waits on it write)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if peer.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0] != TCP_ESTABLISHED:
            return True
        time.sleep(0.05)  # polling the kernel's state: no event tells it
    return False


def rss_mib(pid: int) -> int:
    """A process's resident memory (its /proc status's VmRSS), in MiB."""
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+)", status).group(1)) // 1024  # type: ignore[union-attr]
