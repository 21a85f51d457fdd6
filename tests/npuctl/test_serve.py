"""npuctl serve over real sockets, with the libnoe double standing in for the NPU: the OpenAI
API through the official client, images, limits, bad input, faults, draining, systemd."""

from __future__ import annotations

import base64
import io
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from npuctl.unix_http import UnixHTTPConnection
from testkit.serve_process import Server, start

from .conftest import Board


@pytest.fixture
def server(clip_board: Board, tmp_path: Path):
    running = start(clip_board.env, socket_path=tmp_path / "serve.sock")
    yield running
    assert running.stop() == 0, running.stderr


def vector(item: dict) -> np.ndarray:
    value = item["embedding"]
    if isinstance(value, str):
        return np.frombuffer(base64.b64decode(value), dtype="<f4")
    return np.array(value, dtype=np.float32)


def png_data_uri(color: str = "red", size: int = 64) -> str:
    buffer = io.BytesIO()
    Image.new("RGB", (size, size), color).save(buffer, "PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


# -- the API -------------------------------------------------------------------------------
def test_official_openai_client_gets_full_vectors(server: Server) -> None:
    openai = pytest.importorskip("openai", reason="the openai client is a dev dependency")
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
    # The client asks for base64 unless told otherwise and decodes little-endian float32.
    default = client.embeddings.create(model="clip", input=["hello world", "a red circle"])
    floats = client.embeddings.create(
        model="clip", input=["hello world", "a red circle"], encoding_format="float"
    )
    assert [len(item.embedding) for item in default.data] == [512, 512]
    assert default.usage.prompt_tokens == floats.usage.prompt_tokens == 4 + 5
    for left, right in zip(default.data, floats.data, strict=True):
        assert np.allclose(left.embedding, right.embedding, atol=1e-6)
        assert abs(np.linalg.norm(left.embedding) - 1) < 1e-5
    assert not np.allclose(default.data[0].embedding, default.data[1].embedding)
    models = client.models.list()
    assert next(model.id for model in models.data) == "clip"


def test_same_vector_as_npuctl_run_over_tcp_and_unix_socket(
    server: Server, clip_board: Board
) -> None:
    document = {"input": "a photo of a bus", "encoding_format": "float"}
    over_tcp = vector(server.embed(document).json()["data"][0])
    assert server.socket_path is not None
    over_unix = vector(
        server.embed(document, connection=UnixHTTPConnection(server.socket_path)).json()["data"][0]
    )
    run = clip_board.npuctl_json("run", "clip-text", "a photo of a bus")
    expected = np.array(run["embeddings"][0]["embedding"], dtype=np.float32)
    assert np.array_equal(over_tcp, over_unix)
    assert np.allclose(over_tcp, expected, atol=1e-5)


def test_images_share_the_endpoint(server: Server) -> None:
    red = png_data_uri("red")
    answer = server.embed({"input": [red, "a red square", png_data_uri("blue")]})
    assert answer.status == 200, answer.body
    data = answer.json()["data"]
    vectors = [vector(item) for item in data]
    assert [len(v) for v in vectors] == [512, 512, 512]
    assert not np.allclose(vectors[0], vectors[2])
    assert answer.json()["usage"]["prompt_tokens"] == 5  # images count no tokens
    bare = server.embed({"input": red.split(",", 1)[1], "modality": "image"})
    assert np.array_equal(vector(bare.json()["data"][0]), vectors[0])


def test_token_id_input(server: Server) -> None:
    by_text = server.embed({"input": "hello world"}).json()["data"][0]
    ids = server.embed({"input": [3306, 1002]}).json()["data"][0]  # 'hello world' in CLIP's BPE
    assert np.array_equal(vector(by_text), vector(ids))
    assert server.embed({"input": [[1, 2], [3]]}).status == 200
    assert server.embed({"input": [10**9]}).json()["error"]["code"] == "invalid_value"


@pytest.mark.parametrize(
    ("document", "status", "code"),
    [
        ({"input": "x", "model": "text-embedding-3-small"}, 404, "model_not_found"),
        ({"input": "x", "dimensions": 256}, 400, "invalid_value"),
        ({"input": "x", "encoding_format": "hex"}, 400, "invalid_value"),
        ({"input": "word " * 100}, 400, "context_length_exceeded"),
        ({"input": 5}, 400, "invalid_type"),
        ({"input": []}, 400, "invalid_type"),
        ({"input": [{"text": "x"}]}, 400, "invalid_type"),
        ({"input": [""]}, 400, "invalid_input"),
        ({"input": "x", "truncate": "yes"}, 400, "invalid_type"),
        ({"input": "x", "modality": "audio"}, 400, "invalid_value"),
        ({"input": ["x"] * 10_000}, 400, "too_many_inputs"),
        ({"input": "data:image/png;base64,aGVsbG8="}, 415, "unsupported_media_type"),
        ({"input": "data:image/png;base64,@@@"}, 400, "invalid_input"),
        ({"input": "https://example.org/cat.jpg", "modality": "image"}, 400, "invalid_value"),
    ],
)
def test_bad_requests_get_openai_errors(
    server: Server, document: dict, status: int, code: str
) -> None:
    answer = server.embed(document)
    assert answer.status == status, answer.body
    error = answer.json()["error"]
    assert error["code"] == code
    assert error["type"] == "invalid_request_error"
    assert error["message"]
    assert server.request("GET", "/health").status == 200


def test_long_texts_are_cut_when_asked(clip_board: Board, server: Server) -> None:
    long_text = "word " * 100
    asked = server.embed({"input": long_text, "truncate": True})
    assert asked.status == 200
    assert asked.json()["usage"]["prompt_tokens"] == 77
    cutting = start(clip_board.env, "--truncate")
    try:
        assert cutting.embed({"input": long_text}).status == 200
        assert cutting.embed({"input": long_text, "truncate": False}).status == 400
    finally:
        assert cutting.stop() == 0


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        (b"{not json", 400),
        (b"[1, 2]", 400),
        (b"\xff\xfe", 400),
        (b"[" * 100_000 + b"]" * 100_000, 400),  # nested past the parser's recursion
        (b'{"input": "x"' + b" " * (10 * 1024 * 1024) + b"}", 413),
    ],
    ids=["not-json", "not-an-object", "not-utf8", "nested-deep", "10-MB"],
)
def test_malformed_and_huge_bodies(server: Server, raw: bytes, status: int) -> None:
    answer = server.request("POST", "/v1/embeddings", raw)
    assert answer.status == status
    assert "error" in answer.json()
    assert server.embed({"input": "still serving"}).status == 200


def test_http_level_mistakes(server: Server) -> None:
    assert server.request("GET", "/v1/embeddings").status == 405
    assert server.request("GET", "/nope").json()["error"]["code"] == "not_found"
    assert server.request("GET", "/v1/models/clip").json()["id"] == "clip"
    assert server.request("GET", "/v1/models/gpt-4").status == 404
    for request, status in (
        (b"GARBAGE\r\n\r\n", b"400"),
        (b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\n\r\n", b"411"),
        (b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n", b"400"),
        (b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\n\r\n", b"414"),
        (b"GET / HTTP/1.1\r\nHost: x\r\n" + b"X-Many: %s\r\n" % (b"v" * 4000) * 20, b"431"),
        (b"DELETE /v1/embeddings HTTP/1.1\r\nHost: x\r\n\r\n", b"405"),
    ):
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as raw:
            raw.sendall(request)
            # aiohttp answers a request it cannot parse as HTTP/1.0
            assert raw.recv(100).split(b" ")[1] == status
    assert server.request("GET", "/health").status == 200


def read_answers(
    raw: socket.socket, count: int, bodiless: tuple[int, ...] = ()
) -> list[tuple[bytes, bytes]]:
    """``count`` whole answers (head, body) from a raw connection; the answers numbered in
    ``bodiless`` (to HEAD) have a Content-Length but no body."""
    answers, pending = [], b""
    while len(answers) < count:
        while b"\r\n\r\n" not in pending:
            chunk = raw.recv(65536)
            assert chunk, f"the server closed after {len(answers)} answers"
            pending += chunk
        head, _, pending = pending.partition(b"\r\n\r\n")
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        if len(answers) in bodiless:
            answers.append((head, b""))
            continue
        while len(pending) < length:
            chunk = raw.recv(65536)
            assert chunk, "the server closed in the middle of an answer"
            pending += chunk
        answers.append((head, pending[:length]))
        pending = pending[length:]
    return answers


def test_what_http_clients_do(server: Server) -> None:
    """Chunked bodies, Expect: 100-continue (curl, for bodies over 1 KiB), pipelining,
    HTTP/1.0 and HEAD, over a raw socket."""
    document = json.dumps({"input": "chunked", "encoding_format": "float"}).encode()
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in (document[:9], document[9:]))
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as raw:
        raw.sendall(
            b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
            + chunked
            + b"0\r\n\r\n"
        )
        ((head, body),) = read_answers(raw, 1)
        assert head.startswith(b"HTTP/1.1 200")
        assert len(json.loads(body)["data"][0]["embedding"]) == 512

        raw.sendall(
            b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
            b"Content-Length: %d\r\n\r\n" % len(document)
        )
        assert raw.recv(100) == b"HTTP/1.1 100 Continue\r\n\r\n"
        raw.sendall(document)
        ((head, _),) = read_answers(raw, 1)
        assert head.startswith(b"HTTP/1.1 200")

        get = b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"
        post = b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (
            len(document),
            document,
        )
        raw.sendall(get + post + b"HEAD /health HTTP/1.1\r\nHost: x\r\n\r\n" + get)
        models, embedded, health, last = read_answers(raw, 4, bodiless=(2,))
        assert json.loads(models[1])["object"] == "list"
        assert json.loads(embedded[1])["data"][0]["object"] == "embedding"
        # HEAD: the length of the body GET would have, and no body: the next answer follows
        assert health[0].startswith(b"HTTP/1.1 200") and b"Content-Length: 15" in health[0]
        assert json.loads(last[1])["object"] == "list"

    # A body too large is refused before the client sends it.
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as raw:
        raw.sendall(
            b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
            b"Content-Length: 50000000\r\n\r\n"
        )
        ((head, body),) = read_answers(raw, 1)
        assert head.startswith(b"HTTP/1.1 413")
        assert b"connection: close" in head.lower()
        assert json.loads(body)["error"]["code"] == "request_too_large"

    # HTTP/1.0 closes after the answer unless the client asks to keep the connection.
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as raw:
        raw.sendall(b"GET /health HTTP/1.0\r\n\r\n")
        ((head, _),) = read_answers(raw, 1)
        assert head.startswith(b"HTTP/1.")
        assert raw.recv(100) == b""  # closed: HTTP/1.0's default
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as raw:
        raw.sendall(b"GET /health HTTP/1.0\r\nConnection: keep-alive\r\n\r\n" * 2)
        first, second = read_answers(raw, 2)
        assert b"connection: keep-alive" in first[0].lower()
        assert second[0].startswith((b"HTTP/1.1 200", b"HTTP/1.0 200"))


def test_health_ready_and_metrics(server: Server) -> None:
    assert server.request("GET", "/health").json() == {"status": "ok"}
    ready = server.request("GET", "/ready")
    assert ready.status == 200 and ready.json()["status"] == "ready"
    server.embed({"input": ["one", "two"]})
    server.embed({"input": "x", "model": "nope"})
    text = server.request("GET", "/metrics").body.decode()
    assert 'npuctl_serve_requests_total{code="200",endpoint="/v1/embeddings"} 1.0' in text
    assert 'npuctl_serve_errors_total{kind="model_not_found"} 1.0' in text
    assert 'npuctl_serve_inputs_total{modality="text"} 2.0' in text
    for stage in ("queue", "preprocess", "npu", "serialize"):
        assert f'npuctl_serve_stage_duration_seconds_count{{stage="{stage}"}}' in text
    assert "npuctl_serve_queue_depth 0.0" in text
    assert 'npuctl_serve_job_reuse{model="clip-text"} 1.0' in text


def test_the_duration_histograms_are_whole_prometheus_histograms(server: Server) -> None:
    """Each series: buckets that only grow, the +Inf bucket equal to the count, a sum, and
    every input of a request counted once in each of its stages."""
    from prometheus_client.parser import text_string_to_metric_families

    def npu_count() -> float:
        return server.metric('npuctl_serve_stage_duration_seconds_count{stage="npu"}')

    before = npu_count()
    assert server.embed({"input": ["one", "two", "three"]}).status == 200
    assert npu_count() == before + 3
    text = server.request("GET", "/metrics").body.decode()
    histograms = {
        family.name: family
        for family in text_string_to_metric_families(text)
        if family.type == "histogram"
    }
    assert set(histograms) == {
        "npuctl_serve_stage_duration_seconds",
        "npuctl_serve_model_duration_seconds",
        "npuctl_serve_request_duration_seconds",
    }
    for family in histograms.values():
        series: dict[tuple, dict[str, list]] = {}
        for sample in family.samples:
            labels = tuple(sorted((k, v) for k, v in sample.labels.items() if k != "le"))
            kind = sample.name.removeprefix(family.name)
            series.setdefault(labels, {}).setdefault(kind, []).append(
                (float(sample.labels.get("le", "nan")), sample.value)
            )
        assert series, family.name
        for labels, parts in series.items():
            bounds = [bound for bound, _ in parts["_bucket"]]
            counts = [count for _, count in parts["_bucket"]]
            assert bounds == sorted(bounds) and bounds[-1] == float("inf"), labels
            assert counts == sorted(counts), (family.name, labels, counts)
            assert counts[-1] == parts["_count"][0][1], (family.name, labels)
            assert parts["_sum"][0][1] >= 0, (family.name, labels)
    model = histograms["npuctl_serve_model_duration_seconds"]
    assert any(sample.labels.get("model") == "clip-text" for sample in model.samples)


def test_a_duration_on_a_bucket_bound_counts_in_that_bucket() -> None:
    """Prometheus's buckets hold every value up to and including their bound."""
    from prometheus_client.parser import text_string_to_metric_families

    from npuctl.serve.metrics import Metrics

    metrics = Metrics()
    for seconds in (0.001, 0.0010001, 20.0):
        metrics.stage("npu", seconds)
    (family,) = (
        family
        for family in text_string_to_metric_families(metrics.render().decode())
        if family.name == "npuctl_serve_stage_duration_seconds"
    )
    npu = {
        sample.labels["le"]: sample.value
        for sample in family.samples
        if sample.labels.get("stage") == "npu" and sample.name.endswith("_bucket")
    }
    assert (npu["0.0005"], npu["0.001"], npu["0.0025"], npu["10.0"], npu["+Inf"]) == (
        0, 1, 2, 2, 3,
    )  # fmt: skip


def test_metrics_count_each_answer_before_the_client_reads_it(server: Server) -> None:
    """A client that reads /metrics right after its answer finds its request counted."""
    counter = 'npuctl_serve_requests_total{code="200",endpoint="/v1/embeddings"}'
    for number in range(1, 41):
        assert server.embed({"input": f"request {number}"}).status == 200
        assert server.metric(counter) == number


# -- limits --------------------------------------------------------------------------------
def test_slowloris_is_cut_off_and_others_are_served(clip_board: Board) -> None:
    server = start(clip_board.env, "--read-timeout", "1")
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as slow:
            slow.sendall(b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\n")
            started = time.monotonic()
            closed = False
            while time.monotonic() - started < 10:
                assert server.embed({"input": "meanwhile"}).status == 200
                try:
                    slow.sendall(b"X-Slow: 1\r\n")
                    slow.settimeout(0.2)
                    closed = slow.recv(100) == b""
                except TimeoutError:
                    continue
                except OSError:
                    closed = True
                if closed:
                    break
            assert closed, "a client dribbling headers kept its connection"
            assert time.monotonic() - started < 5
        assert server.metric('npuctl_serve_errors_total{kind="slow_client"}') >= 1
    finally:
        assert server.stop() == 0


def _busy_error(body: bytes) -> dict:
    error = json.loads(body)["error"]
    assert error["code"] == "busy" and error["type"] == "server_error", error
    return error


def hold_in_request(server: Server) -> socket.socket:
    """A connection inside a request: its head taken (the server said 100 Continue), its body
    still coming."""
    raw = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    raw.sendall(
        b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
        b"Content-Length: 100\r\n\r\n"
    )
    assert raw.recv(100) == b"HTTP/1.1 100 Continue\r\n\r\n"
    raw.sendall(b'{"input"')
    return raw


def test_connections_over_the_limit_get_a_complete_503(clip_board: Board, tmp_path: Path) -> None:
    """When every connection is inside a request, each client a saturated server turns away
    reads a whole 503: its declared length, its JSON body and its Retry-After (a short body
    made curl fail and Python clients raise)."""
    server = start(clip_board.env, "--max-connections", "2")
    request = {"input": "a photo of a cat", "encoding_format": "float"}
    try:
        held = [hold_in_request(server) for _ in range(2)]
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as raw:
            raw.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            received = b""
            while chunk := raw.recv(65536):
                received += chunk
        head, _, body = received.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 503")
        declared = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        assert declared == len(body)
        assert b"\r\nretry-after: 1" in head.lower()
        _busy_error(body)

        plain = server.connection()
        plain.request("POST", "/v1/embeddings", json.dumps(request).encode())
        response = plain.getresponse()
        assert response.status == 503 and response.getheader("Retry-After") == "1"
        _busy_error(response.read())  # IncompleteRead before the fix
        plain.close()

        headers, body_file = tmp_path / "headers", tmp_path / "body"
        curl = subprocess.run(
            ["curl", "--silent", "--show-error", "--dump-header", headers, "--output",
             body_file, "--write-out", "%{http_code}", "--json", json.dumps(request),
             f"{server.url}/v1/embeddings"],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        if curl.returncode == 2 and "--json" in curl.stderr:  # curl < 7.82
            pytest.fail("curl too old for --json: " + curl.stderr)
        assert curl.returncode == 0, curl.stderr  # 18: transfer closed with bytes remaining
        assert curl.stdout == "503"
        assert "retry-after: 1" in headers.read_text().lower()
        _busy_error(body_file.read_bytes())

        openai = pytest.importorskip("openai", reason="the openai client is a dev dependency")
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
        with pytest.raises(openai.InternalServerError) as refused:
            client.embeddings.create(model="clip-text", input="a photo of a cat")
        assert refused.value.status_code == 503
        assert refused.value.response.headers["retry-after"] == "1"
        assert refused.value.code == "busy"

        for raw in held:  # the held requests end (their bodies are not JSON: 400)
            raw.sendall(b" " * 92)
            assert raw.recv(100).startswith(b"HTTP/1.1 400")
            raw.close()
        metrics = server.request("GET", "/metrics").body.decode()
        assert re.search(r'^npuctl_serve_errors_total\{kind="busy"\} ([4-9]|\d\d)', metrics, re.M)
    finally:
        assert server.stop() == 0


def test_idle_and_half_sent_connections_make_room_for_probes(clip_board: Board) -> None:
    """At the limit, a newcomer takes the place of the oldest connection that is idle or has
    not finished its head: slow or half-open clients never keep /health out."""
    server = start(clip_board.env, "--max-connections", "4", "--head-timeout", "30")
    try:
        idle = [server.connection() for _ in range(2)]
        for connection in idle:
            assert server.request("GET", "/health", connection=connection).status == 200
        half = []
        for _ in range(2):
            raw = socket.create_connection(("127.0.0.1", server.port), timeout=10)
            raw.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: 1\r\n")
            half.append(raw)
        probes = [server.connection() for _ in range(4)]  # kept open: each needs a place
        for probe in probes:
            assert server.request("GET", "/health", connection=probe).status == 200
        for raw in half:  # closed to make room, without an answer
            assert raw.recv(100) == b""
            raw.close()
        assert server.metric('npuctl_serve_errors_total{kind="evicted"}') >= 4
        assert server.metric('npuctl_serve_errors_total{kind="busy"}') == 0
        for connection in idle + probes:
            connection.close()
    finally:
        assert server.stop() == 0


def test_full_queue_answers_429_with_retry_after(clip_board: Board) -> None:
    server = start(clip_board.env, "--queue-size", "2")
    try:
        answer = server.embed({"input": ["a", "b", "c"]})
        assert answer.status == 429
        assert answer.json()["error"]["type"] == "rate_limit_error"
        assert int(answer.headers["Retry-After"]) >= 1
        assert server.embed({"input": ["a", "b"]}).status == 200
        assert server.metric('npuctl_serve_errors_total{kind="queue_full"}') == 1
    finally:
        assert server.stop() == 0


# -- faults --------------------------------------------------------------------------------
@pytest.mark.parametrize(("status", "kind"), [("0x23", "npu_timeout"), ("0x11", "npu_error")])
def test_npu_failure_fails_one_request_and_serving_goes_on(
    clip_board: Board, status: str, kind: str
) -> None:
    # Start-up runs 12 inferences (the reuse probe of both models: 3 each; the warm-up: the
    # first golden input twice and the second once, per model): the 15th is the third
    # request's.
    env = {**clip_board.env, "NOE_DOUBLE_FAIL": f"infer@15={status}"}
    server = start(env)
    try:
        answers = [server.embed({"input": f"text {n}"}) for n in range(6)]
        assert [a.status for a in answers] == [200, 200, 503, 200, 200, 200]
        failed = answers[2].json()["error"]
        assert failed["type"] == "server_error" and failed["code"] == kind
        assert status[2:].upper() in failed["message"]
        assert server.metric(f'npuctl_serve_errors_total{{kind="{kind}"}}') == 1
        assert server.request("GET", "/ready").status == 200
    finally:
        assert server.stop() == 0


def test_a_model_that_crashes_libnoe_is_refused_at_start(clip_board: Board) -> None:
    (clip_board.models / "clip_txt.cix").write_text("not a model\n")
    server = start(clip_board.env, wait=False)
    assert server.process.wait(120) == 4
    server.ended.wait(10)
    assert "crashed libnoe" in server.stderr and "malformed" in server.stderr
    assert "Traceback" not in server.stderr


def test_missing_model_and_busy_port_are_one_line_errors(clip_board: Board) -> None:
    first = start(clip_board.env)
    try:
        busy = clip_board.npuctl("serve", "--port", str(first.port), "--no-unix-socket")
        assert busy.returncode == 7, busy.stderr
        assert "cannot listen on 127.0.0.1" in busy.stderr
        assert len(busy.stderr.strip().splitlines()) == 1
    finally:
        assert first.stop() == 0
    (clip_board.models / "clip_txt.cix").unlink()
    missing = clip_board.npuctl("serve", "--models", "clip-text", "--port", "0", "--no-unix-socket")
    assert missing.returncode == 4
    assert "clip-text" in missing.stderr and "npuctl models fetch clip-text" in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1
    (clip_board.models / "clip_visual.cix").unlink()
    nothing = clip_board.npuctl("serve", "--port", "0", "--no-unix-socket")
    assert nothing.returncode == 4, nothing.stderr
    assert "no model to serve is downloaded" in nothing.stderr
    assert len(nothing.stderr.strip().splitlines()) == 1
    unknown = clip_board.npuctl("serve", "--models", "resnet", "--port", "0")
    assert unknown.returncode == 2 and "no model 'resnet'" in unknown.stderr


def test_client_that_disconnects_costs_no_npu_time(clip_board: Board) -> None:
    env = {**clip_board.env, "NOE_DOUBLE_INFER_MS": "300"}
    server = start(env)
    try:
        before = clip_board.calls().count("infer")
        body = json.dumps({"input": ["a", "b", "c", "d"]}).encode()
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as gone:
            gone.sendall(
                b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Length: "
                + str(len(body)).encode()
                + b"\r\n\r\n"
                + body
            )
            # The NPU has the first of the four inputs (an empty queue is no sign: the
            # request may not have been read yet), then the client leaves.
            wait_for(lambda: clip_board.calls().count("infer") > before)
        wait_for(lambda: server.metric('npuctl_serve_errors_total{kind="cancelled"}') >= 1)
        assert server.embed({"input": "after"}).status == 200
        spent = clip_board.calls().count("infer") - before - 1
        assert spent < 4, f"{spent} inferences for a client that left"
    finally:
        assert server.stop() == 0


def wait_for(condition, timeout: float = 30) -> None:
    """Poll a condition the server exposes (its metrics), never a fixed sleep."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.02)


def test_stale_job_reuse_is_detected_at_start(clip_board: Board) -> None:
    server = start({**clip_board.env, "NOE_DOUBLE_STALE_REUSE": "1"})
    try:
        assert "a new job per input" in server.stderr
        assert server.metric('npuctl_serve_job_reuse{model="clip-text"}') == 0
        first, second = (
            vector(server.embed({"input": text}).json()["data"][0]) for text in ("cat", "dog")
        )
        assert not np.allclose(first, second)
    finally:
        assert server.stop() == 0


# -- running as a service ------------------------------------------------------------------
def test_sigterm_drains_in_flight_requests(clip_board: Board, tmp_path: Path) -> None:
    env = {**clip_board.env, "NOE_DOUBLE_INFER_MS": "200"}
    server = start(env, socket_path=tmp_path / "s.sock")
    result: dict = {}

    def slow_request() -> None:
        result["answer"] = server.embed({"input": ["a", "b", "c", "d", "e"]})

    client = threading.Thread(target=slow_request)
    client.start()
    wait_for(lambda: server.metric("npuctl_serve_queue_depth") > 0)
    server.process.send_signal(signal.SIGTERM)
    client.join(60)
    assert server.process.wait(60) == 0
    assert result["answer"].status == 200
    assert len(result["answer"].json()["data"]) == 5
    assert not (tmp_path / "s.sock").exists()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", server.port), timeout=5).close()


def test_systemd_notify_ready_watchdog_and_stopping(clip_board: Board, tmp_path: Path) -> None:
    address = tmp_path / "notify"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as notify:
        notify.bind(str(address))
        notify.settimeout(60)
        env = {**clip_board.env, "NOTIFY_SOCKET": str(address), "WATCHDOG_USEC": "200000"}
        server = start(env)
        messages = []
        while "WATCHDOG=1" not in messages:
            messages.append(notify.recv(100).decode())
        assert messages[0] == "READY=1"
        server.process.send_signal(signal.SIGTERM)
        while messages[-1] != "STOPPING=1":
            messages.append(notify.recv(100).decode())
        assert server.process.wait(60) == 0


def test_the_container_health_check_asks_health(server: Server) -> None:
    """The images' HEALTHCHECK: exit 0 while /health answers, 1 with one line otherwise."""

    def check(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "npuctl.serve.healthcheck", *args],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
            check=False,
        )

    healthy = check(f"{server.url}/health")
    assert healthy.returncode == 0 and healthy.stdout == "", healthy.stdout + healthy.stderr
    by_environment = check(env={**os.environ, "NPUCTL_HEALTH_URL": f"{server.url}/health"})
    assert by_environment.returncode == 0
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    for url in (f"http://127.0.0.1:{port}/health", f"{server.url}/no-such-path", "ftp://x"):
        down = check(url)
        assert down.returncode == 1 and down.stderr == ""
        assert len(down.stdout.splitlines()) == 1 and down.stdout.startswith("unhealthy: ")
