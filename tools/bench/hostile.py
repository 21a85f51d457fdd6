"""make bench, the hostile set: npuctl serve (YOLOv8n and CLIP on the libnoe double) under
the attacks an unauthenticated peer can send, each measured while it runs:

- endless headers: eight connections each sending one header value as fast as the socket
  takes it, reconnecting whenever the server cuts them; the server's CPU per attacking
  connection against the attack's duration;
- seventy slow clients from one address, a header line each every 100 ms, reconnecting when
  cut; /health asked meanwhile on new connections: the share answered 200;
- eight picture bombs at once (1-bit PNGs of 7000 x 7000, 147 MB each decoded): the server's
  resident memory afterwards against its warm size;
- Frigate's ZeroMQ endpoint (npuctl serve --zmq): Frigate's own client sending frames while
  four processes flood the endpoint with empty frames (MORE, nothing in them), then with
  PING commands, each coming back whenever it is closed: the frames' p99 against Frigate's
  200 ms request timeout (the same frames with nobody attacking, same run, for the eye).
"""

from __future__ import annotations

import contextlib
import io
import multiprocessing
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from PIL import Image

from bench.doubles import Doubles, doubles
from bench.frigate_zmq import FRIGATE_TIMEOUT_S, frame_of, free_port
from bench.report import print_rows
from bench.serve_cost import cpu_seconds, rss_kib
from bench.vision_cost import form
from testkit.frigate_client import FrigateZmqClient
from testkit.serve_process import Server, start
from testkit.zmtp_peer import GREETING, ping, ready

BENCH = "hostile"
ATTACK_SECONDS = 4.0


def attack(
    server: Server, connections: int, opening: bytes, each: Callable[[socket.socket], None]
) -> float:
    """``connections`` attackers for ATTACK_SECONDS, each sending ``opening`` and then
    ``each`` over and over, reconnecting when cut; the server's CPU seconds meanwhile."""
    stop = threading.Event()

    def attacker() -> None:
        while not stop.is_set():
            try:
                with socket.create_connection(("127.0.0.1", server.port), timeout=5) as raw:
                    raw.sendall(opening)
                    while not stop.is_set():
                        each(raw)
            except OSError:
                continue  # cut: come back, as an attacker does

    before = cpu_seconds(server.process.pid)
    threads = [threading.Thread(target=attacker, daemon=True) for _ in range(connections)]
    for thread in threads:
        thread.start()
    stop.wait(ATTACK_SECONDS)
    stop.set()
    used = cpu_seconds(server.process.pid) - before
    for thread in threads:
        thread.join(timeout=10)
    return used


def endless_header_row(server: Server) -> dict:
    value = b"a" * 16384

    def endless(raw: socket.socket) -> None:
        raw.sendall(value)

    connections = 8
    opening = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Endless: "
    per_connection = attack(server, connections, opening, endless) / connections
    ratio = per_connection / ATTACK_SECONDS
    return {
        "name": "endless header values, 8 connections: server CPU per connection",
        "unit": "s of CPU; reference: the attack's duration",
        "ours": per_connection,
        "reference": ATTACK_SECONDS,
        "ratio": ratio,
        "target": "ours/reference <= 0.1",
        "ok": ratio <= 0.1 and health_answers(server),
    }


def slow_clients_row(server: Server) -> list[dict]:
    asked = answered = 0

    def dribble(raw: socket.socket) -> None:
        raw.sendall(b"X-Slow: 1\r\n")
        time.sleep(0.1)  # the attacker's pace, not a wait for the server

    def probe() -> None:
        nonlocal asked, answered
        deadline = time.monotonic() + ATTACK_SECONDS
        while time.monotonic() < deadline:
            asked += 1
            with contextlib.suppress(OSError):
                answered += server.request("GET", "/health").status == 200

    prober = threading.Thread(target=probe)
    prober.start()
    connections = 70
    opening = b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\n"
    per_connection = attack(server, connections, opening, dribble) / connections
    prober.join()
    availability = answered / asked
    return [
        {
            "name": "70 slow clients: /health answered while they dribble",
            "unit": "share of /health probes answered 200; reference: all of them",
            "ours": availability,
            "reference": 1.0,
            "ratio": availability,
            "target": "ours/reference >= 0.99",
            "ok": availability >= 0.99,
        },
        {
            "name": "70 slow clients: server CPU per connection",
            "unit": "s of CPU; reference: the attack's duration",
            "ours": per_connection,
            "reference": ATTACK_SECONDS,
            "ratio": per_connection / ATTACK_SECONDS,
            "target": "ours/reference <= 0.1",
            "ok": per_connection / ATTACK_SECONDS <= 0.1,
        },
    ]


def bombs_row(server: Server) -> dict:
    picture = io.BytesIO()
    Image.new("1", (7000, 7000)).save(picture, "PNG")
    body, headers = form(picture.getvalue())

    def post() -> int:
        connection = server.connection(timeout=120)
        try:
            connection.request("POST", "/v1/vision/detection", body=body, headers=headers)
            response = connection.getresponse()
            response.read()
            return response.status
        finally:
            connection.close()

    for _ in range(3):  # warm: the model and a first picture's buffers
        assert post() == 200
    warm = rss_kib(server.process.pid)
    statuses: list[int] = []
    threads = [threading.Thread(target=lambda: statuses.append(post())) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    after = rss_kib(server.process.pid)
    return {
        "name": "8 picture bombs at once: resident memory afterwards",
        "unit": "MiB; reference: the warm server's",
        "ours": after / 1024,
        "reference": warm / 1024,
        "ratio": after / warm,
        "target": "ours/reference <= 1.2, every bomb answered",
        "ok": after / warm <= 1.2 and statuses == [200] * 8,
    }


# -- Frigate's ZeroMQ endpoint -------------------------------------------------------------
ZMQ_FLOODS = {
    "an empty-frame flood": b"\x01\x00" * 32768,
    "a PING flood": ping() * 8192,
}
FLOODERS = 4
FRAMES = 150


def flooder(port: int, flood: bytes, stop: multiprocessing.synchronize.Event) -> None:
    """An attacker of its own process: a ZMTP handshake, then the flood as fast as the
    socket takes it, again on a new connection whenever the server closes it."""
    opening = GREETING + ready(b"DEALER")
    while not stop.is_set():
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2) as raw:
                raw.sendall(opening)
                while not stop.is_set():
                    raw.sendall(flood)
        except OSError:
            continue


def frame_latencies(endpoint: str, pixels: np.ndarray, count: int) -> tuple[list[float], int]:
    """Frigate's client, its 200 ms timeout: each frame's latency (a frame it timed out on
    counts its whole wait), and how many timed out."""
    client = FrigateZmqClient(endpoint, "yolov8n.cix", "yologeneric")
    try:
        assert client.model_ready, client.logged
        for _ in range(5):
            client.detect_raw(pixels)  # warm
        reconnects = client.reconnects
        latencies = []
        for _ in range(count):
            started = time.perf_counter()
            client.detect_raw(pixels)
            latencies.append(time.perf_counter() - started)
        return latencies, client.reconnects - reconnects
    finally:
        client.close()


def p99(latencies: list[float]) -> float:
    ordered = sorted(latencies)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def zmq_rows(found: Doubles) -> list[dict]:
    port = free_port()
    endpoint = f"tcp://127.0.0.1:{port}"
    server = start(found.zhouyi, "--models", "yolo", "--zmq", endpoint)
    pixels = frame_of(found.bus, (1, 3, 640, 640), "nchw")
    try:
        idle, _ = frame_latencies(endpoint, pixels, FRAMES)
        idle_row = {
            "name": "  (information: the same frames with nobody attacking: p99)",
            "unit": "ms; reference: Frigate's request timeout",
            "ours": p99(idle) * 1000,
            "reference": FRIGATE_TIMEOUT_S * 1000,
            "ratio": p99(idle) / FRIGATE_TIMEOUT_S,
            "target": "none",
            "ok": True,
        }
        rows = []
        for name, flood in ZMQ_FLOODS.items():
            stop = multiprocessing.Event()
            attackers = [
                multiprocessing.Process(target=flooder, args=(port, flood, stop), daemon=True)
                for _ in range(FLOODERS)
            ]
            for attacker in attackers:
                attacker.start()
            try:
                latencies, timed_out = frame_latencies(endpoint, pixels, FRAMES)
            finally:
                stop.set()
                for attacker in attackers:
                    attacker.join(10)
            ours = p99(latencies)
            rows.append(
                {
                    "name": f"Frigate zmq frames under {name} ({FLOODERS} processes): p99",
                    "unit": "ms; reference: Frigate's request timeout",
                    "ours": ours * 1000,
                    "reference": FRIGATE_TIMEOUT_S * 1000,
                    "ratio": ours / FRIGATE_TIMEOUT_S,
                    "target": "ours/reference < 1, no frame timed out",
                    "ok": ours < FRIGATE_TIMEOUT_S and timed_out == 0,
                }
            )
        rows.append(idle_row)
        if "Traceback" in server.stderr:
            raise RuntimeError(f"the server logged a traceback:\n{server.stderr[-3000:]}")
    finally:
        server.stop()
    return rows


def health_answers(server: Server) -> bool:
    return server.request("GET", "/health").status == 200


def main() -> int:
    with tempfile.TemporaryDirectory() as scratch_name:
        scratch = Path(scratch_name)
        found = doubles(scratch)
        server = start(found.zhouyi, "--models", "yolo")
        try:
            results = [endless_header_row(server), *slow_clients_row(server), bombs_row(server)]
            if "Traceback" in server.stderr:
                raise RuntimeError(f"the server logged a traceback:\n{server.stderr[-3000:]}")
        finally:
            server.stop()
        results += zmq_rows(found)
    return 0 if print_rows(results, BENCH) else 1


if __name__ == "__main__":
    sys.exit(main())
