"""make bench, the server: npuctl serve as a child process with the libnoe double standing in
for the NPU, measured from a client in this process.

- overhead: a request's latency minus the direct in-process call (tokenize, NPU, normalise)
  measured in the same run; beside it the community-style server (bench.seed_server);
- throughput with 15 ms inferences and 8 clients, against the NPU-bound limit;
- a load test: 10,000 requests from 32 clients with bursts over the queue limit and injected
  libnoe timeouts; every answer is accounted for, and the server's memory must stay flat.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np

from bench.host_cost import build_double, metric_strings, test_data
from bench.report import print_rows
from npuctl.cli import Settings
from npuctl.platforms.zhouyi.embedder import ClipEmbedder
from tests.npuctl.serve_process import Server, start
from tests.testdata import CLIP_ANYTORCH, CLIP_VOCAB_SHA256

TEXT_MODEL = "NOEDOUBLE 1\ninput S32 308 1.0 0\noutput S8 512 27.67 60\n"
VISUAL_MODEL = "NOEDOUBLE 1\ninput U8 150528 64.75 12\noutput S8 512 29.52 -80\n"


class Board:
    def __init__(self, scratch: Path, vocab: Path) -> None:
        self.library = build_double(scratch)
        self.device = scratch / "aipu"
        self.device.write_bytes(b"")
        self.models = scratch / "models"
        self.models.mkdir()
        (self.models / "clip_txt.cix").write_text(TEXT_MODEL)
        (self.models / "clip_visual.cix").write_text(VISUAL_MODEL)
        shutil.copyfile(vocab, self.models / vocab.name)
        self.env = {
            "PATH": "/usr/bin:/bin",
            "NPUCTL_LIBNOE": str(self.library),
            "NPUCTL_MODELS": str(self.models),
            "NOE_DOUBLE_DEVICE": str(self.device),
        }

    def settings(self) -> Settings:
        return Settings(
            self.models, 50_000_000, "zhouyi", {"library": self.library, "timeout_ms": 10_000}
        )


def percentiles(seconds: list[float]) -> tuple[float, float]:
    values = np.array(seconds) * 1000
    return float(np.percentile(values, 50)), float(np.percentile(values, 99))


def direct_call(board: Board, texts: list[str]) -> list[float]:
    """The work a request asks for, called in-process: no HTTP, no queue, no encoding."""
    import os

    os.environ["NOE_DOUBLE_DEVICE"] = str(board.device)
    embedder = ClipEmbedder(board.settings())
    embedder.start()
    try:
        samples = []
        for text in texts:
            started = time.perf_counter()
            vector = embedder.embed(embedder.prepare_text(text, True))
            vector / np.linalg.norm(vector)
            samples.append(time.perf_counter() - started)
        return samples
    finally:
        embedder.stop()


def exchange(sock: socket.socket, request: bytes) -> bytes:
    """One request and its whole answer, with as little client work as possible (like wrk):
    the client's own cost is in every latency measured here, the server's and the seed's."""
    sock.sendall(request)
    received = b""
    while b"\r\n\r\n" not in received:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("the server closed the connection")
        received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200") and not head.startswith(b"HTTP/1.0 200"):
        raise AssertionError(head[:100])
    length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
    while len(body) < length:
        body += sock.recv(65536)
    return body


def serial_latencies(port: int, texts: list[str], encoding: str, keep_alive: bool) -> list[float]:
    requests = []
    for text in texts:
        body = json.dumps({"input": text, "encoding_format": encoding}).encode()
        requests.append(
            b"POST /v1/embeddings HTTP/1.1\r\nHost: localhost\r\nContent-Type: "
            b"application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
        )
    samples = []
    sock = None
    for request in requests:
        started = time.perf_counter()
        if sock is None:
            sock = socket.create_connection(("127.0.0.1", port))
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        exchange(sock, request)
        if not keep_alive:  # HTTP/1.0: a connection per request
            sock.close()
            sock = None
        samples.append(time.perf_counter() - started)
    if sock is not None:
        sock.close()
    return samples


def on_the_servers_core(server: Server, texts: list[str]) -> list[float]:
    """The same requests from a client on the core the server's threads use: what is left
    when no request has to wake another core (on a virtual machine each wake-up is an
    exit to the host). Printed beside the rows, to tell the server's cost from the
    machine's; empty when the server's threads are not on one core."""
    servers_cpus = os.sched_getaffinity(server.process.pid)  # its main thread, pinned first
    if len(servers_cpus) != 1:
        return []
    allowed = os.sched_getaffinity(0)
    os.sched_setaffinity(0, servers_cpus)
    try:
        return serial_latencies(server.port, texts, "base64", keep_alive=True)
    finally:
        os.sched_setaffinity(0, allowed)


def bench_overhead(board: Board) -> list[dict]:
    texts = metric_strings(3000, seed=11)
    warm, measured = texts[:300], texts[300:]
    direct_call(board, warm)
    direct = direct_call(board, measured)
    server = start(board.env)
    try:
        serial_latencies(server.port, warm, "base64", keep_alive=True)
        ours = {
            encoding: serial_latencies(server.port, measured, encoding, keep_alive=True)
            for encoding in ("base64", "float")
        }
        same_core = on_the_servers_core(server, measured)
    finally:
        server.stop()
    seed = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bench.seed_server",
            str(board.library),
            str(board.models / "clip_txt.cix"),
            str(next(board.models.glob("*.gz"))),
        ],
        stdout=subprocess.PIPE,
        text=True,
        env={**board.env, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
    )
    try:
        assert seed.stdout is not None
        port = int(seed.stdout.readline())
        serial_latencies(port, warm, "float", keep_alive=False)
        reference = serial_latencies(port, measured[:1000], "float", keep_alive=False)
    finally:
        seed.terminate()
        seed.wait()
    direct_p50, direct_p99 = percentiles(direct)
    seed_p50, seed_p99 = percentiles(reference)
    if same_core:
        p50, p99 = percentiles(same_core)
        print(
            f"serve overhead with the client on the server's core (no wake-up of another "
            f"core): p50 {p50 - direct_p50:.3f} ms, p99 {p99 - direct_p99:.3f} ms (base64)"
        )
    rows = []
    for encoding, samples in ours.items():
        p50, p99 = percentiles(samples)
        over50, over99 = p50 - direct_p50, p99 - direct_p99
        rows.append(
            {
                "name": f"serve overhead per text request, p50 ({encoding})",
                "unit": "ms over the direct call; reference: the seed-style server",
                "ours": over50,
                "reference": seed_p50 - direct_p50,
                "ratio": (seed_p50 - direct_p50) / max(over50, 1e-6),
                "target": "p50 <= 0.3 ms",
                "ok": over50 <= 0.3,
            }
        )
        rows.append(
            {
                "name": f"serve overhead per text request, p99 ({encoding})",
                "unit": "ms over the direct call; reference: the seed-style server",
                "ours": over99,
                "reference": seed_p99 - direct_p99,
                "ratio": (seed_p99 - direct_p99) / max(over99, 1e-6),
                "target": "p99 <= 1 ms",
                "ok": over99 <= 1.0,
            }
        )
    return rows


def concurrent(
    server: Server, clients: int, requests: int, document_of: Callable[[int], dict]
) -> tuple[Counter, float, list[str]]:
    """``requests`` requests from ``clients`` keep-alive clients; status counts, seconds,
    and every answer that was not a complete, well-formed one."""
    statuses: Counter = Counter()
    problems: list[str] = []
    lock = threading.Lock()
    counter = iter(range(requests))

    def client() -> None:
        connection = server.connection(timeout=60)
        while True:
            with lock:
                number = next(counter, None)
            if number is None:
                break
            document = document_of(number)
            try:
                connection.request("POST", "/v1/embeddings", json.dumps(document).encode())
                response = connection.getresponse()
                payload = response.read()
            except (OSError, http.client.HTTPException) as error:
                with lock:
                    problems.append(f"request {number}: {error!r}")
                connection.close()
                connection = server.connection(timeout=60)
                continue
            problem = check_answer(response.status, payload, document)
            with lock:
                statuses[response.status] += 1
                if problem:
                    problems.append(f"request {number}: {problem}")
            if response.getheader("Connection") == "close":
                connection.close()
                connection = server.connection(timeout=60)
        connection.close()

    threads = [threading.Thread(target=client) for _ in range(clients)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return statuses, time.perf_counter() - started, problems


def check_answer(status: int, payload: bytes, document: dict) -> str | None:
    try:
        answer = json.loads(payload)
    except ValueError:
        return f"status {status} with a body that is not JSON"
    if status == 200:
        inputs = document["input"]
        count = 1 if isinstance(inputs, str) else len(inputs)
        data = answer.get("data", [])
        if len(data) != count:
            return f"{len(data)} vectors for {count} inputs"
        for item in data:
            if len(base64.b64decode(item["embedding"])) != 512 * 4:
                return "a vector that is not 512 float32"
        return None
    if status in (429, 503) and "error" in answer:
        return None
    return f"status {status}: {payload[:200]!r}"


def bench_throughput(board: Board) -> dict:
    server = start({**board.env, "NOE_DOUBLE_INFER_MS": "15"})
    texts = metric_strings(600, seed=12)
    try:

        def document(number: int) -> dict:
            return {"input": texts[number], "encoding_format": "base64"}

        concurrent(server, 8, 40, document)  # warm-up
        statuses, seconds, problems = concurrent(server, 8, 600, document)
    finally:
        server.stop()
    rate = statuses[200] / seconds
    limit = 1 / 0.015
    return {
        "name": "serve throughput, 15 ms inferences, 8 clients",
        "unit": "requests/s; reference: the NPU-bound limit 1/15 ms",
        "ours": rate,
        "reference": limit,
        "ratio": rate / limit,
        "target": ">= 95 % of the limit, all 200",
        "ok": rate >= 0.95 * limit and statuses[200] == 600 and not problems,
    }


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def bench_load(board: Board) -> list[dict]:
    env = {**board.env, "NOE_DOUBLE_FAIL": "infer%997=0x23"}
    server = start(env, "--queue-size", "64", "--max-connections", "64")
    texts = metric_strings(1000, seed=13)

    def document(number: int) -> dict:
        if number % 500 == 499:  # a burst: more inputs at once than the queue holds
            return {"input": texts[:48], "encoding_format": "base64"}
        return {"input": texts[number % len(texts)], "encoding_format": "base64"}

    try:
        concurrent(server, 32, 1000, document)  # warm-up
        after_warm_up = rss_kib(server.process.pid)
        statuses, seconds, problems = concurrent(server, 32, 10_000, document)
        after = rss_kib(server.process.pid)
        alive = server.request("GET", "/health").status == 200
    finally:
        server.stop()
    answered = sum(statuses.values())
    unexpected = answered - statuses[200] - statuses[429] - statuses[503]
    print(
        f"load test: {answered} answers in {seconds:.1f} s ({dict(statuses)}), "
        f"RSS {after_warm_up} -> {after} KiB, problems: {problems[:3]}"
    )
    return [
        {
            "name": "serve load: 10,000 requests, 32 clients, bursts, injected timeouts",
            "unit": "answers other than 200/429/503 or lost",
            "ours": float(unexpected + len(problems) + (10_000 - answered)),
            "reference": 0.0,
            "ratio": 1.0,
            "target": "0, and the server alive",
            "ok": unexpected == 0 and not problems and answered == 10_000 and alive,
        },
        {
            "name": "serve load: RSS after / after warm-up",
            "unit": "ratio of resident memory",
            "ours": after / after_warm_up,
            "reference": 1.1,
            "ratio": 1.1 / (after / after_warm_up),
            "target": "<= 1.1",
            "ok": after / after_warm_up <= 1.1,
        },
    ]


def main() -> int:
    vocab = test_data(CLIP_ANYTORCH, "clip/bpe_simple_vocab_16e6.txt.gz", CLIP_VOCAB_SHA256)
    with tempfile.TemporaryDirectory() as scratch:
        board = Board(Path(scratch), vocab)
        results = [*bench_overhead(board), bench_throughput(board), *bench_load(board)]
    return 0 if print_rows(results) else 1


if __name__ == "__main__":
    sys.exit(main())
