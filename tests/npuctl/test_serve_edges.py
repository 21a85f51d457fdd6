# ruff: noqa: F811  (the fixture imported below is a parameter of the tests)
"""npuctl serve at the edges a client, a camera or an attacker reaches, each as they send it:
endless and slow heads, forms and tensors that once answered 500, picture bombs, the signals
systemd sends, and what DeepStack's, OpenAI's and Triton's clients expect of 404, 405, 413
and the extensions. After each: no 5xx, no traceback in the log, /health 200."""

from __future__ import annotations

import contextlib
import gzip
import json
import re
import signal
import socket
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from testkit.serve_process import Server, start

from .conftest import Board
from .test_serve_vision import KEY, curl_form, yolo_board  # noqa: F401 - a fixture

V2_TEXT = {"inputs": [{"name": "input_ids", "datatype": "INT32", "shape": [1, 77]}]}


def served_and_clean(server: Server) -> None:
    assert server.request("GET", "/health").status == 200
    assert "Traceback" not in server.stderr, server.stderr
    assert not re.search(r"\b5\d\d\b.*internal", server.stderr)


def rss_kib(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+)", status).group(1))  # type: ignore[union-attr]


# -- heads ---------------------------------------------------------------------------------
def test_an_endless_header_is_cut_at_the_limit_with_431(clip_board: Board) -> None:
    server = start(clip_board.env)
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as raw:
            raw.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Endless: ")
            sent = 0
            try:
                while sent < 64 * 1024 * 1024:
                    raw.sendall(b"a" * 65536)
                    sent += 65536
            except OSError:  # closed once it had answered
                pass
            endless = raw.recv(65536)
        assert endless.startswith(b"HTTP/1.1 431"), endless[:200]
        assert sent < 8 * 1024 * 1024, "the server read far past its head limit"
        body = json.loads(endless.partition(b"\r\n\r\n")[2])
        assert body["error"]["code"] == "headers_too_large"
        served_and_clean(server)
    finally:
        assert server.stop() == 0


def test_answers_aiohttp_writes_itself_name_no_versions(clip_board: Board) -> None:
    server = start(clip_board.env)
    try:
        for head in (
            b"GET /health HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n",
            b"POST /embeddings HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: bogus\r\n\r\n",
            b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Bad\x01: y\r\n\r\n",
        ):
            with socket.create_connection(("127.0.0.1", server.port), timeout=10) as raw:
                raw.sendall(head)
                answer = raw.recv(65536)
            assert re.match(rb"HTTP/1\.[01] 4\d\d ", answer), answer[:200]
            assert b"\r\nServer: npuctl-serve\r\n" in answer, answer[:300]
            assert b"aiohttp" not in answer and b"Python/" not in answer, answer[:300]
        served_and_clean(server)
    finally:
        assert server.stop() == 0


def test_a_head_sent_slowly_is_closed_at_the_head_timeout(clip_board: Board) -> None:
    server = start(clip_board.env, "--head-timeout", "1", "--body-timeout", "30")
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as slow:
            slow.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
            began = time.monotonic()
            answer = slow.recv(65536)
            assert answer.startswith(b"HTTP/1.1 408"), answer[:100]
            assert time.monotonic() - began < 5
        # A body is held to its own timeout, not the head's: this upload takes 2 s.
        document = json.dumps({"input": "slow body"}).encode()
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as upload:
            upload.sendall(
                b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
                % len(document)
            )
            for byte in range(len(document)):
                upload.sendall(document[byte : byte + 1])
                if byte % 10 == 0:
                    time.sleep(0.1)  # a slow sender, not synchronisation
            assert upload.recv(100).startswith(b"HTTP/1.1 200")
        served_and_clean(server)
    finally:
        assert server.stop() == 0


# -- what once answered 500 ----------------------------------------------------------------
def test_an_urlencoded_form_of_many_fields_is_a_4xx_in_deepstack_shape(yolo_board, tmp_path):
    key_file = tmp_path / "key"
    key_file.write_text(KEY)
    for extra in ((), ("--api-key-file", str(key_file))):
        server = start(yolo_board.env, "--models", "yolo", *extra)
        try:
            fields = "&".join(f"f{n}=v" for n in range(33)).encode()
            answer = server.request(
                "POST", "/v1/vision/detection", fields,
                headers={"Content-Type": "application/x-www-form-urlencoded"},
            )  # fmt: skip
            assert answer.status == (401 if extra else 400), answer.body
            assert answer.json()["success"] is False
            served_and_clean(server)
        finally:
            assert server.stop() == 0


# -- bodies --------------------------------------------------------------------------------
def test_a_chunked_body_trickled_holds_what_it_sent_not_the_whole_budget(clip_board):
    """A chunked body once held its route's limit x 24 of the body budget (the whole budget)
    from its first byte, so one peer trickling one kept every other body waiting until the
    body timeout and then 503."""
    server = start(clip_board.env, "--body-timeout", "5", "--memory-limit", str(600 * 2**20))
    try:
        holders = []
        for path in (b"/embeddings", b"/v1/embeddings", b"/v2/models/clip-text/infer"):
            holder = socket.create_connection(("127.0.0.1", server.port), timeout=30)
            holder.sendall(
                b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Transfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n" % path
            )
            assert holder.recv(100).startswith(b"HTTP/1.1 100"), path  # its handler runs
            holder.sendall(b"1\r\n{\r\n")
            holders.append(holder)
        began = time.monotonic()
        small = server.embed({"input": "a person"})
        assert small.status == 200, small.body
        llama = server.request("POST", "/embeddings", {"content": "a person"})
        assert llama.status == 200, llama.body
        assert time.monotonic() - began < 4, "the small requests waited for the trickling one"
        for holder in holders:
            assert holder.recv(200).startswith(b"HTTP/1.1 408")
            holder.close()
        served_and_clean(server)
    finally:
        assert server.stop() == 0


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_a_body_that_does_not_decode_is_400_in_each_protocols_shape(clip_board, encoding):
    server = start(clip_board.env)
    try:
        headers = {"Content-Type": "application/json", "Content-Encoding": encoding}
        for path, error in (
            ("/embeddings", lambda body: body["error"]["message"]),  # llama.cpp
            ("/v1/embeddings", lambda body: body["error"]["message"]),  # OpenAI
            ("/v2/models/clip-text/infer", lambda body: body["error"]),  # KServe
        ):
            answer = server.request("POST", path, b"garbage!", headers=headers)
            assert answer.status == 400, (path, answer.body)
            assert "does not decode" in error(answer.json()), (path, answer.body)
        form = {"Content-Type": "multipart/form-data; boundary=b", "Content-Encoding": encoding}
        immich = server.request("POST", "/predict", b"garbage!", headers=form)
        assert immich.status == 400 and "does not decode" in immich.json()["detail"], immich.body
        served_and_clean(server)
    finally:
        assert server.stop() == 0


def test_a_client_that_hangs_up_inside_its_body_is_no_internal_error(clip_board: Board) -> None:
    server = start(clip_board.env)
    try:
        for _ in range(5):
            with socket.create_connection(("127.0.0.1", server.port), timeout=10) as peer:
                peer.sendall(
                    b"POST /embeddings HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n"
                    b"Expect: 100-continue\r\n\r\n"
                )
                assert peer.recv(100).startswith(b"HTTP/1.1 100")  # inside its handler
                peer.sendall(b'{"content"')
                peer.shutdown(socket.SHUT_WR)
                assert peer.recv(300) == b""
        deadline = time.monotonic() + 30
        kinds = ('{kind="cancelled"}', '{kind="invalid_request"}')  # lost, or cut short
        while sum(server.metric(f"npuctl_serve_errors_total{kind}") for kind in kinds) < 1:
            assert time.monotonic() < deadline, server.stderr  # (was: each one "internal")
        assert server.metric('npuctl_serve_errors_total{kind="internal"}') == 0
        assert "internal error" not in server.stderr
        served_and_clean(server)
    finally:
        assert server.stop() == 0


def test_a_binary_data_size_that_is_not_a_whole_number_is_400(clip_board: Board) -> None:
    server = start(clip_board.env)
    try:
        tensor = np.zeros((1, 77), dtype=np.int32).tobytes()
        head = json.dumps(
            {"inputs": [{**V2_TEXT["inputs"][0], "parameters": {"binary_data_size": 308.0}}]}
        ).encode()
        answer = server.request(
            "POST", "/v2/models/clip-text/infer", head + tensor,
            headers={"Inference-Header-Content-Length": str(len(head)),
                     "Content-Type": "application/octet-stream"},
        )  # fmt: skip
        assert answer.status == 400 and "whole number" in answer.json()["error"]
        served_and_clean(server)
    finally:
        assert server.stop() == 0


@pytest.mark.parametrize(
    "disposition",
    [
        'form-data; name="image"; filename="blob"',
        'form-data; name="entries"',
        'form-data; name="min_confidence"',
        'form-data; name="a.b-c_d"; filename="photo 1.jpg"',
        'form-data; name="caf\u00e9"',
        'form-data; name="a\\"b"',
        "form-data; name*=UTF-8''caf%C3%A9",
        'form-data; name="x"; filename="%41.jpg"',
        'Form-Data; name="image"',
        "form-data; name=image",
        'form-data; name=""',
        "form-data",
        "",
        'form-data; name="a"; name="b"',
    ],
)
# The duplicate name is malformed on purpose: aiohttp warns about it as it parses (the server
# itself silences library warnings).
@pytest.mark.filterwarnings("ignore::aiohttp.multipart.BadContentDispositionHeader")
def test_a_parts_name_is_the_one_aiohttp_reads(disposition: str) -> None:
    """The direct reading of plain part heads gives what aiohttp's own parser does."""
    from aiohttp import BodyPartReader
    from multidict import CIMultiDict, CIMultiDictProxy

    from npuctl.serve.protocol import part_name

    headers = CIMultiDictProxy(CIMultiDict({"Content-Disposition": disposition}))
    part = BodyPartReader(b"--x", headers, None)  # type: ignore[arg-type]
    assert part_name(part) == part.name


# -- pictures --------------------------------------------------------------------------------
def test_picture_bombs_at_once_leave_the_memory_where_it_was(yolo_board, tmp_path):
    """1-bit PNGs of 7000 x 7000: a few kilobytes each, 147 MB each decoded; eight at once."""
    bomb = tmp_path / "bomb.png"
    Image.new("1", (7000, 7000)).save(bomb)
    eps = tmp_path / "picture.eps"
    eps.write_bytes(b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 10 10\nshowpage\n")
    server = start(yolo_board.env, "--models", "yolo")
    try:
        for _ in range(3):  # warm: the model and a first picture's buffers
            assert curl_form(server, "/v1/vision/detection", f"image=@{bomb}")[0] == 200
        warm = rss_kib(server.process.pid)
        statuses: list[int] = []

        def post() -> None:
            statuses.append(curl_form(server, "/v1/vision/detection", f"image=@{bomb}")[0])

        threads = [threading.Thread(target=post) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert statuses == [200] * 8
        after = rss_kib(server.process.pid)
        assert after <= 1.2 * warm + 64 * 1024, (warm, after)
        status, answer = curl_form(server, "/v1/vision/detection", f"image=@{eps}")
        assert status == 415 and "JPEG, PNG, WebP or BMP" in answer["error"]
        served_and_clean(server)
    finally:
        assert server.stop() == 0


def test_a_4k_snapshot_is_taken_and_a_413_comes_in_the_routes_shape(yolo_board, tmp_path):
    """Home Assistant sends the camera's full frame; curl sends Expect: 100-continue above
    1 MiB, and a 413 must come in DeepStack's shape with it and without it."""
    rng = np.random.default_rng(4)
    snapshot = tmp_path / "4k.jpg"
    Image.fromarray(rng.integers(0, 256, (2160, 3840, 3), dtype=np.uint8)).save(
        snapshot, quality=90
    )
    assert snapshot.stat().st_size > 2 * 1024 * 1024
    server = start(yolo_board.env, "--models", "yolo")
    try:
        status, answer = curl_form(server, "/v1/vision/detection", f"image=@{snapshot}")
        assert status == 200 and answer["success"] is True
    finally:
        assert server.stop() == 0
    small = start(yolo_board.env, "--models", "yolo", "--max-upload", "1048576")
    try:
        for headers in ((), ("Expect:",)):  # curl's 100-continue, then without it
            status, answer = curl_form(
                small, "/v1/vision/detection", f"image=@{snapshot}", headers=headers
            )
            assert status == 413 and answer["success"] is False and answer["code"] == 413
            assert "--max-upload" in answer["error"]
        served_and_clean(small)
    finally:
        assert small.stop() == 0


def test_detections_are_best_first_named_capped_and_well_formed(yolo_board, bus_jpg):
    server = start(yolo_board.env, "--models", "yolo", "--max-detections", "1")
    try:
        status, answer = curl_form(
            server, "/v1/vision/detection", f"image=@{bus_jpg}", "min_confidence=0.1"
        )
        assert status == 200 and len(answer["predictions"]) == 1
    finally:
        assert server.stop() == 0
    server = start(yolo_board.env, "--models", "yolo")
    try:
        status, answer = curl_form(
            server, "/v1/vision/detection", f"image=@{bus_jpg}", "min_confidence=0.1"
        )
        width, height = Image.open(bus_jpg).size
        found = answer["predictions"]
        assert status == 200 and 2 <= len(found) <= 20
        scores = [p["confidence"] for p in found]
        assert scores == sorted(scores, reverse=True)
        for p in found:
            assert not p["label"].isdigit()
            assert 0 <= p["x_min"] < p["x_max"] <= width
            assert 0 <= p["y_min"] < p["y_max"] <= height
    finally:
        assert server.stop() == 0


# -- routes, as each client reads them -------------------------------------------------------
def test_404_for_what_is_not_served_and_405_with_allow_for_what_is(yolo_board, bus_jpg):
    server = start(yolo_board.env, "--models", "yolo")
    try:
        for method in ("GET", "POST", "DELETE"):
            assert server.request(method, "/nope", b"").status == 404
        wrong = server.request("GET", "/v1/vision/detection")
        assert wrong.status == 405 and wrong.headers["Allow"] == "POST"
        assert wrong.json()["success"] is False
        wrong = server.request("DELETE", "/v1/embeddings")
        assert wrong.status == 405 and "POST" in wrong.headers["Allow"]
        health = server.request("POST", "/health")
        assert health.status == 405 and health.headers["Allow"] == "GET,HEAD"
        # Paths no pattern of the router spells: still the path's API's 404, in JSON.
        for path, shape in (
            ("/x%0Ay", "error"),
            ("/v1/vision/%0A", "success"),
            ("/v2/%0D", "error"),
        ):
            odd = server.request("POST", path, b"")
            assert odd.status == 404 and shape in odd.json(), path
        for path in ("/v1/vision/scene", "/v1/vision/face/recognize", "/v1/vision/custom/x"):
            status, answer = curl_form(server, path, "image=@/dev/null")
            assert status == 404 and answer["success"] is False, path
            assert "/v1/vision/detection and /v1/vision/classification" in answer["error"]
        deepstack = pytest.importorskip("deepstack.core", reason="deepstack-python: make deps")
        picture = bus_jpg.read_bytes()
        found = deepstack.DeepstackObject("127.0.0.1", server.port, timeout=10).detect(picture)
        assert found and {"label", "confidence", "x_min"} <= set(found[0])
        scene = deepstack.DeepstackScene("127.0.0.1", server.port, timeout=10)
        with pytest.raises(deepstack.DeepstackException, match="Bad url"):  # its 404 branch
            scene.recognize(picture)
        face = deepstack.DeepstackFace("127.0.0.1", server.port, timeout=10)
        with pytest.raises(deepstack.DeepstackException, match="Bad url"):
            face.detect(picture)
        served_and_clean(server)
    finally:
        assert server.stop() == 0


def test_the_openai_client_reads_an_unknown_model_as_404(clip_board: Board) -> None:
    openai = pytest.importorskip("openai", reason="the openai client is a dev dependency")
    server = start(clip_board.env)
    try:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
        with pytest.raises(openai.NotFoundError) as missing:
            client.embeddings.create(model="text-embedding-3-small", input="a cat")
        assert missing.value.code == "model_not_found"
        served_and_clean(server)
    finally:
        assert server.stop() == 0


def test_an_empty_form_key_never_outweighs_a_valid_bearer_header(yolo_board, bus_jpg, tmp_path):
    key_file = tmp_path / "key"
    key_file.write_text(KEY)
    server = start(yolo_board.env, "--models", "yolo", "--api-key-file", str(key_file))
    try:
        bearer = (f"Authorization: Bearer {KEY}",)
        status, _ = curl_form(
            server, "/v1/vision/detection", f"image=@{bus_jpg}", "api_key=", headers=bearer
        )
        assert status == 200
        status, _ = curl_form(
            server, "/v1/vision/detection", f"image=@{bus_jpg}", "api_key=wrong", headers=bearer
        )
        assert status == 200  # alternatives: one valid credential is enough
        status, _ = curl_form(server, "/v1/vision/detection", f"image=@{bus_jpg}", "api_key=")
        assert status == 401
    finally:
        assert server.stop() == 0


def test_tritonclient_reads_config_stats_index_gzip_and_classes(clip_board: Board) -> None:
    httpclient = pytest.importorskip("tritonclient.http", reason="tritonclient is a dev dependency")
    server = start(clip_board.env)
    try:
        client = httpclient.InferenceServerClient(f"127.0.0.1:{server.port}")
        config = client.get_model_config("clip-text")
        assert config["name"] == "clip-text" and config["input"][0]["name"] == "input_ids"
        index = client.get_model_repository_index()
        assert {entry["name"] for entry in index} == {"clip-text", "clip-visual"}
        ids = np.zeros((1, 77), dtype=np.int32)
        ids[0, :3] = (49406, 320, 49407)
        tensor = httpclient.InferInput("input_ids", [1, 77], "INT32")
        tensor.set_data_from_numpy(ids)
        plain = client.infer("clip-text", [tensor])
        for algorithm in ("gzip", "deflate"):
            compressed = client.infer(
                "clip-text", [tensor], request_compression_algorithm=algorithm
            )
            name = plain.get_response()["outputs"][0]["name"]
            assert np.array_equal(compressed.as_numpy(name), plain.as_numpy(name))
        name = plain.get_response()["outputs"][0]["name"]
        top = client.infer(
            "clip-text", [tensor], outputs=[httpclient.InferRequestedOutput(name, class_count=3)]
        ).as_numpy(name)
        assert len(top) == 3 and all(len(entry.split(b":")) >= 2 for entry in top)
        stats = client.get_inference_statistics("clip-text")
        assert stats["model_stats"][0]["inference_count"] == 4
        assert client.get_inference_statistics()["model_stats"]
        brotli = server.request(
            "POST", "/v2/models/clip-text/infer", gzip.compress(b"{}"),
            headers={"Content-Encoding": "br"},
        )  # fmt: skip
        assert brotli.status == 415 and set(brotli.json()) == {"error"}
        served_and_clean(server)
    finally:
        assert server.stop() == 0


# -- signals -------------------------------------------------------------------------------
def wait_for_line(server: Server, text: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while text not in server.stderr:
        assert time.monotonic() < deadline, f"no {text!r} in:\n{server.stderr}"
        assert server.process.poll() is None, server.stderr
        time.sleep(0.05)


def test_sighup_reads_the_key_file_again(yolo_board, tmp_path):
    key_file = tmp_path / "key"
    key_file.write_text("first-key")
    server = start(yolo_board.env, "--models", "yolo", "--api-key-file", str(key_file))
    try:

        def status(key: str) -> int:
            return server.request(
                "GET", "/v2/models/yolov8n", headers={"Authorization": f"Bearer {key}"}
            ).status

        assert (status("first-key"), status("second-key")) == (200, 401)
        key_file.write_text("second-key\n")
        server.process.send_signal(signal.SIGHUP)
        wait_for_line(server, "SIGHUP: reloaded the API key")
        assert (status("first-key"), status("second-key")) == (401, 200)
        key_file.write_text("")  # broken: the key in use stays
        server.process.send_signal(signal.SIGHUP)
        wait_for_line(server, "SIGHUP: kept the API key")
        assert status("second-key") == 200
    finally:
        assert server.stop() == 0


def test_sigterm_finishes_an_upload_being_received_and_refuses_new_requests(clip_board):
    server = start(clip_board.env)
    try:
        waiting = server.connection()  # open before the signal: the listener closes then
        assert server.request("GET", "/health", connection=waiting).status == 200
        document = json.dumps({"input": "sent across the signal"}).encode()
        upload = socket.create_connection(("127.0.0.1", server.port), timeout=30)
        upload.sendall(
            b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
            b"Content-Length: %d\r\n\r\n" % len(document)
        )
        assert upload.recv(100) == b"HTTP/1.1 100 Continue\r\n\r\n"
        upload.sendall(document[:10])
        server.process.send_signal(signal.SIGTERM)
        wait_for_line(server, "stopping: finishing the requests in flight")
        refused = server.request("GET", "/v1/models", connection=waiting)
        assert refused.status == 503 and int(refused.headers["Retry-After"]) >= 1
        upload.sendall(document[10:])
        answer = b""
        while b"\r\n\r\n" not in answer:
            answer += upload.recv(65536)
        assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
        upload.close()
        waiting.close()
        assert server.process.wait(60) == 0
    finally:
        server.stop()
    assert "Traceback" not in server.stderr


def test_the_unit_reloads_with_sighup() -> None:
    from pipeline.npuctl_package import serve_unit

    text = serve_unit()
    assert "ExecReload=/bin/kill -HUP $MAINPID" in text
    assert re.search(r"^MemoryMax=1G$", text, re.M)  # as the K3s manifests' limit


def test_the_served_routes_and_limits_in_the_docs_are_the_servers() -> None:
    from serve_tables import render

    page = Path(__file__).resolve().parents[2] / "docs/serving.md"
    text = page.read_text()
    assert render(text) == text, "docs/serving.md is out of date: run 'make serve-tables'"


def test_an_npu_call_that_never_returns_ends_its_request_and_turns_health_503(
    clip_board: Board, tmp_path: Path
) -> None:
    """The libnoe double hangs once the server is up: that request ends with 504 at its
    deadline, /health turns 503, systemd's watchdog pings stop, and SIGTERM still ends the
    server."""
    hang = tmp_path / "hang-now"
    address = tmp_path / "notify"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as notify:
        notify.bind(str(address))
        notify.settimeout(30)
        env = {
            **clip_board.env,
            "NOE_DOUBLE_HANG_FILE": str(hang),
            "NOTIFY_SOCKET": str(address),
            "WATCHDOG_USEC": "400000",
        }
        server = start(env, "--deadline", "1")
        try:
            while notify.recv(100) != b"WATCHDOG=1":
                pass
            hang.touch()
            began = time.monotonic()
            answer = server.embed({"input": "the NPU stops here"})
            assert answer.status == 504 and answer.json()["error"]["code"] == "npu_timeout"
            assert time.monotonic() - began < 10
            health = server.request("GET", "/health")
            assert health.status == 503 and "has not returned" in health.json()["reason"]
            notify.setblocking(False)  # the pings sent before the hang was seen
            with contextlib.suppress(BlockingIOError):
                while True:
                    notify.recv(100)
            notify.settimeout(2)  # ten watchdog periods: no ping comes any more
            with pytest.raises(TimeoutError):
                while notify.recv(100) != b"WATCHDOG=1":
                    pass
        finally:
            assert server.stop() == 0
    assert "stopping without it" in server.stderr


def test_a_rocket_job_that_never_returns_ends_its_request_and_turns_health_503(
    rocket_models, bus_jpg: Path, tmp_path: Path
) -> None:
    """The same on the RK3588: the Teflon double's job hangs once the server is up; the
    DeepStack request ends with 504 in DeepStack's shape, /health turns 503, and SIGTERM
    still ends the server."""
    hang = tmp_path / "hang-now"
    env = {
        **rocket_models.env,
        "NPUCTL_PLATFORM": "rocket",
        "TEFLON_DOUBLE_INFER_MS": "5",
        "TEFLON_DOUBLE_HANG_FILE": str(hang),
    }
    server = start(env, "--models", "ssdlite", "--deadline", "1")
    try:
        status, answer = curl_form(server, "/v1/vision/detection", f"image=@{bus_jpg}")
        assert status == 200, answer
        hang.touch()
        began = time.monotonic()
        status, answer = curl_form(server, "/v1/vision/detection", f"image=@{bus_jpg}")
        assert status == 504 and answer["success"] is False and answer["code"] == 504
        assert time.monotonic() - began < 10
        health = server.request("GET", "/health")
        assert health.status == 503 and "has not returned" in health.json()["reason"]
    finally:
        assert server.stop() == 0
    assert "stopping without it" in server.stderr


def test_seventy_slow_clients_leave_health_answering(clip_board: Board) -> None:
    """Seventy connections from one address dribbling their heads, a header line at a time
    (and reconnecting whenever they are cut, as an attacker would): /health, asked 200 times
    meanwhile on new connections, answers at least 99 % of them."""
    server = start(clip_board.env)
    stop = threading.Event()
    reconnects = [0]

    def attack() -> None:
        def opened() -> socket.socket:
            raw = socket.create_connection(("127.0.0.1", server.port), timeout=5)
            raw.sendall(b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\n")
            return raw

        clients = [opened() for _ in range(70)]
        while not stop.wait(0.1):  # the attacker's pace: a header line per client
            for index, raw in enumerate(clients):
                try:
                    raw.sendall(b"X-Slow: 1\r\n")
                except OSError:
                    raw.close()
                    reconnects[0] += 1
                    clients[index] = opened()
        for raw in clients:
            raw.close()

    attacker = threading.Thread(target=attack)
    attacker.start()
    try:
        answered = 0
        for _ in range(200):
            with contextlib.suppress(OSError):
                answered += server.request("GET", "/health").status == 200
        stop.set()
        attacker.join()
        assert answered >= 198, f"/health answered {answered} of 200"
        assert server.request("GET", "/health").status == 200
        # over the 64 places of one address: the oldest half-sent heads made room
        assert server.metric('npuctl_serve_errors_total{kind="evicted"}') >= 6
    finally:
        stop.set()
        assert server.stop() == 0
    assert "Traceback" not in server.stderr
