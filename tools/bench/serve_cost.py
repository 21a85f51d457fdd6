"""make bench, the server: npuctl serve as a child process with the libnoe double standing in
for the NPU, measured from a client in this process.

- overhead: a request's latency minus the direct in-process call on the same text (tokenize,
  NPU, normalise), the two measured in turns, and the server's CPU per request; judged against
  the same work in one handler of the same HTTP stack (bench.stack_server), which moves with
  the machine as the server does; the community-style server (bench.seed_server, Python's
  HTTP/1.0 server), whose cost moves otherwise from one machine to the next, is printed beside
  as information. The client polls for its answers on a core the server does not use,
  so its own wake-ups are not counted as the server's; a sleeping client is printed beside;
- throughput with 15 ms inferences and 8 clients, against the NPU-bound limit, and beside it
  the direct in-process call measured in the same rounds;
- a load test: 10,000 requests from 32 clients with bursts over the queue limit and injected
  libnoe timeouts; every answer is accounted for, and the server's memory must stay flat.
"""

from __future__ import annotations

import base64
import functools
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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bench.host_cost import build_double, metric_strings, test_data
from bench.host_steal import least_disturbed
from bench.report import print_rows
from npuctl.platforms.zhouyi.embedder import ClipEmbedder
from npuctl.settings import Settings
from testkit.serve_process import Server, start
from testkit.testdata import CLIP_ANYTORCH, CLIP_VOCAB_SHA256

ENCODINGS = ("base64", "float")
# Who answers in each turn: npuctl serve per encoding, the same work on the same stack, and
# the community-style server.
SIDES = (*ENCODINGS, "stack", "seed")
# The verdicts against the same stack: npuctl serve's CPU per text request, and its overhead
# over the direct call at p50 and p99, each at most this many times the stack's.
CPU_LIMIT, P50_LIMIT, P99_LIMIT = 1.6, 1.6, 2.0
TEXT_MODEL = "NOEDOUBLE 1\ninput S32 308 1.0 0\noutput S8 512 27.67 60\n"
VISUAL_MODEL = "NOEDOUBLE 1\ninput U8 150528 64.75 12\noutput S8 512 29.52 -80\n"


BENCH = "serve-cost"


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


def percentiles(seconds: np.ndarray) -> tuple[float, float]:
    """p50 and p99 in milliseconds."""
    values = np.asarray(seconds) * 1000
    return float(np.percentile(values, 50)), float(np.percentile(values, 99))


class DirectCall:
    """The work a request asks for, called in-process: no HTTP, no queue, no encoding."""

    def __init__(self, board: Board, infer_ms: int = 0) -> None:
        self.board = board
        self.infer_ms = infer_ms

    def __enter__(self) -> DirectCall:
        os.environ["NOE_DOUBLE_DEVICE"] = str(self.board.device)
        if self.infer_ms:
            os.environ["NOE_DOUBLE_INFER_MS"] = str(self.infer_ms)  # read at each inference
        self.embedder = ClipEmbedder(self.board.settings())
        self.embedder.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.embedder.stop()
        os.environ.pop("NOE_DOUBLE_INFER_MS", None)

    def latency(self, text: str) -> float:
        started = time.perf_counter()
        vector = self.embedder.embed(self.embedder.prepare_text(text, True))
        vector / np.linalg.norm(vector)
        return time.perf_counter() - started


def exchange(sock: socket.socket, request: bytes, poll: bool) -> bytes:
    """One request and its whole answer, with as little client work as possible (like wrk).
    With ``poll`` the client asks for the answer in a loop instead of sleeping in recv: a
    sleeping client's core halts, and waking it again is the client machine's cost, not the
    server's (on this kind of virtual machine, an exit to the host: more than 0.1 ms)."""
    sock.sendall(request)
    received = b""
    flags = socket.MSG_DONTWAIT if poll else 0
    give_up = time.monotonic() + 60
    while True:
        try:
            chunk = sock.recv(65536, flags)
        except BlockingIOError:
            if time.monotonic() > give_up:
                raise TimeoutError("no answer from the server within 60 s") from None
            continue
        if not chunk:
            raise ConnectionError("the server closed the connection")
        received += chunk
        head, found, body = received.partition(b"\r\n\r\n")
        if not found:
            continue
        if not head.startswith((b"HTTP/1.1 200", b"HTTP/1.0 200")):
            raise AssertionError(head[:100])
        length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
        if len(body) >= length:
            return body


class RawClient:
    """Requests one after another from one thread, on one keep-alive connection or (for
    HTTP/1.0 servers) a connection per request; each latency includes the connect."""

    def __init__(self, port: int, keep_alive: bool, poll: bool) -> None:
        self.port = port
        self.keep_alive = keep_alive
        self.poll = poll
        self.sock: socket.socket | None = None

    def latency(self, text: str, encoding: str) -> float:
        body = json.dumps({"input": text, "encoding_format": encoding}).encode()
        request = (
            b"POST /v1/embeddings HTTP/1.1\r\nHost: localhost\r\nContent-Type: "
            b"application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
        )
        started = time.perf_counter()
        reused = self.sock is not None
        try:
            exchange(self._connected(), request, self.poll)
        except ConnectionError:
            if not reused:
                raise
            # A keep-alive connection the server closed while it idled (its --head-timeout
            # on a busy machine, where the other sides' turns take seconds): as an HTTP
            # client does, once more on a new one.
            self.close()
            exchange(self._connected(), request, self.poll)
        if not self.keep_alive:  # HTTP/1.0: a connection per request
            self.close()
        return time.perf_counter() - started

    def _connected(self) -> socket.socket:
        if self.sock is None:
            self.sock = socket.create_connection(("127.0.0.1", self.port))
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return self.sock

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None


class Client:
    """Where the measuring client runs. When the server's threads share one core and
    another core is free, the client keeps to the other cores and polls for its answers, so
    a latency is the server's work and the server's wake-up, not the client's; otherwise
    (one core only) it sleeps in recv, as polling would take the server's core."""

    def __init__(self, servers_cpus: set[int]) -> None:
        self.servers_cpus = servers_cpus
        self.allowed = os.sched_getaffinity(0)
        self.cpus = self.allowed - servers_cpus if len(servers_cpus) == 1 else set()
        self.poll = bool(self.cpus)

    def __enter__(self) -> Client:
        if self.poll:
            os.sched_setaffinity(0, self.cpus)  # this thread only
        return self

    def __exit__(self, *_: object) -> None:
        os.sched_setaffinity(0, self.allowed)

    def describe(self) -> str:
        if self.poll:
            return "a client on another core than the server's, polling for its answers"
        return "a client that sleeps in recv (the server's threads are not on one core)"


BLOCK = 30  # texts per turn: the direct call, then each client, on the same texts


def turns(count: int) -> list[range]:
    """The indices of ``count`` texts, BLOCK at a time."""
    return [range(first, min(first + BLOCK, count)) for first in range(0, count, BLOCK)]


@dataclass
class Overheads:
    """One attempt: per text, the direct call and each client's latency, in seconds (``ours``
    by encoding, and "seed" for the seed-style server's)."""

    direct: np.ndarray
    ours: dict[str, np.ndarray]
    sleeping: np.ndarray
    cpu: dict[str, float] = field(default_factory=dict)  # CPU seconds a request, by server

    def over(self, latencies: np.ndarray) -> tuple[float, float]:
        return percentiles(latencies - self.direct)

    def describe(self) -> str:
        parts = []
        for side in SIDES:
            p50, p99 = self.over(self.ours[side])
            parts.append(f"{side} p50 {p50:.3f} ms p99 {p99:.3f} ms")
        return ", ".join(parts)


@dataclass
class Turns:
    """One attempt's turns: the direct call, then each side on the same texts, in turn."""

    measured: list[str]
    client: Client
    call: DirectCall
    senders: dict[str, Callable[[str], float]]
    sleeper: RawClient
    pids: dict[str, int]

    def attempt(self) -> Overheads:
        measured, client, call = self.measured, self.client, self.call
        senders, sleeper, server_pid = self.senders, self.sleeper, self.pids["ours"]
        found = Overheads(
            np.zeros(len(measured)),
            {side: np.zeros(len(measured)) for side in SIDES},
            np.zeros(len(measured)),
        )
        sides = list(SIDES)
        cpu_before = {side: cpu_seconds(pid) for side, pid in self.pids.items()}
        sleeping_cpu = 0.0
        for turn, block in enumerate(turns(len(measured))):
            with client:
                for index in block:
                    found.direct[index] = call.latency(measured[index])
                first = turn % len(sides)  # each goes first in turn
                for side in sides[first:] + sides[:first]:
                    for index in block:
                        found.ours[side][index] = senders[side](measured[index])
            sleeping_from = cpu_seconds(server_pid)
            for index in block:
                found.sleeping[index] = sleeper.latency(measured[index], "base64")
            sleeping_cpu += cpu_seconds(server_pid) - sleeping_from
        # Like for like: the seed-style server answers polling clients only, so ours
        # is counted over its two polling clients' requests (a sleeping client's
        # wake-up is paid in the server's send: printed beside, as information).
        found.cpu["ours"] = (cpu_seconds(server_pid) - cpu_before["ours"] - sleeping_cpu) / (
            2 * len(measured)
        )
        found.cpu["sleeping"] = sleeping_cpu / len(measured)
        for side in ("seed", "stack"):
            pid = self.pids[side]
            found.cpu[side] = (cpu_seconds(pid) - cpu_before[side]) / len(measured)
        return found


@contextmanager
def reference_server(
    board: Board, cpus: set[int] | None, module: str = "bench.seed_server"
) -> Iterator[tuple[int, int]]:
    """A reference server (bench.seed_server, bench.stack_server): its port and pid, while it
    runs."""
    seed = subprocess.Popen(
        [
            sys.executable,
            "-m",
            module,
            str(board.library),
            str(board.models / "clip_txt.cix"),
            str(next(board.models.glob("*.gz"))),
        ],
        stdout=subprocess.PIPE,
        text=True,
        env={**board.env, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},  # tools/
    )
    try:
        assert seed.stdout is not None
        port = int(seed.stdout.readline())
        if cpus:  # where ours runs, away from the client
            os.sched_setaffinity(seed.pid, cpus)
        yield port, seed.pid
    finally:
        seed.terminate()
        seed.wait()


def bench_overhead(board: Board) -> list[dict]:
    """A request's overhead is its latency minus the direct call on the same text, made a few
    milliseconds before in the same turn: the pairs see the same phase of the machine, and
    a percentile of the differences means what it says. The seed-style server is measured in
    the same turns on the same texts, so the verdict, ours against it, holds however busy
    the machine is. Within a turn each client sends its requests back to back, as a
    benchmark client does."""
    texts = metric_strings(3000, seed=11)
    warm, measured = texts[:300], texts[300:]
    server = start(board.env)
    try:
        # Its main thread is pinned before any other thread starts.
        client = Client(os.sched_getaffinity(server.process.pid))
        connections = {
            encoding: RawClient(server.port, True, client.poll) for encoding in ENCODINGS
        }
        sleeper = RawClient(server.port, True, poll=False)
        cpus = client.servers_cpus if client.poll else None
        with (
            reference_server(board, cpus) as (seed_port, seed),
            reference_server(board, cpus, "bench.stack_server") as (stack_port, stack),
            DirectCall(board) as call,
        ):
            per_request = RawClient(seed_port, False, client.poll)
            same_stack = RawClient(stack_port, True, client.poll)
            senders: dict[str, Callable[[str], float]] = {
                "seed": lambda text: per_request.latency(text, "float"),
                # Half its requests in each encoding, as ours is counted over both.
                "stack": lambda text: same_stack.latency(text, ENCODINGS[len(text) % 2]),
                **{
                    encoding: functools.partial(connection.latency, encoding=encoding)
                    for encoding, connection in connections.items()
                },
            }
            with client:
                for text in warm:
                    call.latency(text)
                    for side in ("seed", "stack"):
                        senders[side](text)
                    for encoding, connection in connections.items():
                        connection.latency(text, encoding)
            for text in warm:
                sleeper.latency(text, "base64")

            pids = {"ours": server.process.pid, "seed": seed, "stack": stack}
            turns_of = Turns(measured, client, call, senders, sleeper, pids)
            kept = least_disturbed(turns_of.attempt, Overheads.describe, "serve overhead")
        for connection in (*connections.values(), sleeper, same_stack):
            connection.close()
    finally:
        server.stop()
    print(f"serve overhead measured with {client.describe()}")
    if client.poll:
        p50, p99 = kept.over(kept.sleeping)
        print(
            f"serve overhead with a client that sleeps in recv instead (its core halts and "
            f"must be woken): p50 {p50:.3f} ms, p99 {p99:.3f} ms, "
            f"{kept.cpu['sleeping'] * 1000:.3f} ms of CPU a request (base64; information)"
        )
    return overhead_rows(kept)


def overhead_rows(kept: Overheads) -> list[dict]:
    """The verdicts: CPU per request, and p50 and p99 overhead per encoding, each against the
    same work on the same stack in the same turns; beside them, as information, the same
    against the seed-style server."""
    stack_p50, stack_p99 = kept.over(kept.ours["stack"])
    seed_p50, _ = kept.over(kept.ours["seed"])
    cpu_ratio = kept.cpu["ours"] / max(kept.cpu["stack"], 1e-9)
    stack = "reference: the same work in one aiohttp handler (bench.stack_server)"
    rows = [
        {
            "name": "serve CPU time per text request (the server process, all threads)",
            "unit": f"ms of CPU; {stack}",
            "ours": kept.cpu["ours"] * 1000,
            "reference": kept.cpu["stack"] * 1000,
            "ratio": cpu_ratio,
            "target": f"ours/reference <= {CPU_LIMIT}",
            "ok": cpu_ratio <= CPU_LIMIT,
        },
        {
            "name": "  (information: the same CPU time against the seed-style server's)",
            "unit": "ms of CPU; reference: the seed-style server (HTTP/1.0)",
            "ours": kept.cpu["ours"] * 1000,
            "reference": kept.cpu["seed"] * 1000,
            "ratio": kept.cpu["ours"] / max(kept.cpu["seed"], 1e-9),
            "target": "none",
            "ok": True,
        },
    ]
    for encoding in ENCODINGS:
        p50, p99 = kept.over(kept.ours[encoding])
        # A tail under CPU contention is the scheduler's time slice for both servers.
        for name, ours, reference, limit in (
            ("p50", p50, stack_p50, P50_LIMIT),
            ("p99", p99, stack_p99, P99_LIMIT),
        ):
            ratio = ours / max(reference, 1e-6)
            rows.append(
                {
                    "name": f"serve overhead per text request, {name} ({encoding})",
                    "unit": f"ms over the direct call; {stack}",
                    "ours": ours,
                    "reference": reference,
                    "ratio": ratio,
                    "target": f"ours/reference <= {limit}",
                    "ok": ratio <= limit,
                }
            )
        rows.append(
            {
                "name": f"  (information: the p50 ({encoding}) against the seed-style server's)",
                "unit": "ms over the direct call; reference: the seed-style server (HTTP/1.0)",
                "ours": p50,
                "reference": seed_p50,
                "ratio": p50 / max(seed_p50, 1e-6),
                "target": "none",
                "ok": True,
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
    """Rounds of 120 requests from 8 clients, each beside 30 texts through the direct call
    (tokenize, the double's 15 ms, normalise; one after another in-process, as a program
    using the NPU library itself would): the verdict is the server's rate over the direct
    call's in the same round, so a machine that wakes the NPU's caller late slows both."""
    server = start({**board.env, "NOE_DOUBLE_INFER_MS": "15"})
    texts = metric_strings(600, seed=12)
    requests = 120
    rounds = 5
    try:

        def document(number: int) -> dict:
            return {"input": texts[number % len(texts)], "encoding_format": "base64"}

        concurrent(server, 8, 40, document)  # warm-up
        rates: list[tuple[float, float]] = []
        failures: list[str] = []
        answered = 0
        with DirectCall(board, infer_ms=15) as direct:

            def direct_rate() -> float:
                return 30 / sum(direct.latency(text) for text in texts[:30])

            for round_number in range(rounds):
                direct_first = round_number % 2 == 1
                alone = direct_rate() if direct_first else 0.0
                statuses, seconds, problems = concurrent(server, 8, requests, document)
                if not direct_first:
                    alone = direct_rate()
                answered += statuses[200]
                failures += problems
                rates.append((statuses[200] / seconds, alone))
    finally:
        server.stop()
    ratio = float(np.median([served / alone for served, alone in rates]))
    print(
        "serve throughput by round (served/s, the direct call/s): "
        + ", ".join(f"{served:.1f}/{alone:.1f}" for served, alone in rates)
        + f"; the NPU-bound limit 1/15 ms is {1 / 0.015:.1f}/s (information)"
    )
    return {
        "name": "serve throughput, 15 ms inferences, 8 clients",
        "unit": "requests/s; reference: the direct call in the same round",
        "ours": float(np.median([served for served, _ in rates])),
        "reference": float(np.median([alone for _, alone in rates])),
        "ratio": ratio,
        "target": "ours/reference >= 0.95, all 200",
        "ok": ratio >= 0.95 and answered == requests * rounds and not failures,
    }


def cpu_seconds(pid: int) -> float:
    """CPU time of a process's threads so far, to the nanosecond (each thread's schedstat):
    /proc/PID/stat counts clock ticks, 10 ms each, as coarse as a whole block of requests.
    The servers measured keep their threads, so none is lost by ending in between."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except FileNotFoundError:  # a thread that ended meanwhile
            continue
        except OSError:  # no schedstat in this kernel: the ticks of the whole process
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total / 1e9


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
    return 0 if print_rows(results, BENCH) else 1


if __name__ == "__main__":
    sys.exit(main())
