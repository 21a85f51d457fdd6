"""npuctl serve as Frigate's remote detector (npuctl serve --zmq): the client is what Frigate's
zmq detector does, with pyzmq as it uses it (testkit/frigate_client.py): the model request,
frames in both layouts and dtypes, its timeout, reconnect and new model request, an upload
refused and one taken; on the Zhouyi (libnoe double, YOLOv8n) and the RK3588 (Teflon
double, SSD); then what an attacker sends, each answered or closed, the server serving on."""

from __future__ import annotations

import json
import random
import re
import socket
import struct
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from testkit.serve_process import Server, start
from testkit.yolo_outputs import synthetic_output
from testkit.zmtp_peer import answer_of, raw_peer, rss_mib, send_frames

from .conftest import Board, write_model
from .test_serve_vision import curl_form

zmq = pytest.importorskip("zmq", reason="pyzmq is Frigate's client: run 'make deps'")
from testkit.frigate_client import FrigateZmqClient, detections  # noqa: E402

COCO80 = {index: f"class {index}" for index in range(80)}


def free_port() -> int:
    """A port free now and below the kernel's ephemeral range, so that no outgoing
    connection (of this run or of one beside it) takes it before the server binds it."""
    lowest_ephemeral = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    while True:
        port = random.randrange(10000, max(lowest_ephemeral, 10001))
        with socket.socket() as probe:
            try:
                probe.bind(("0.0.0.0", port))
            except OSError:
                continue
            return port


def serve_zmq(env: dict[str, str], *args: str, wait: bool = True) -> tuple[Server, str]:
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    return start(env, "--zmq", endpoint, *args, wait=wait), endpoint


def frame(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.integers(0, 256, shape, dtype=np.uint8)


def rows_of(rows: np.ndarray) -> list[tuple[int, float, tuple[float, ...]]]:
    return [(int(r[0]), float(r[1]), tuple(float(v) for v in r[2:])) for r in rows if r[1] > 0]


# -- the Zhouyi: YOLOv8n ------------------------------------------------------------------
def test_frigate_gets_yolos_detections_as_deepstack_does(yolo: Board, tmp_path: Path) -> None:
    """Model request by Frigate's file name, then one frame in each layout and dtype Frigate
    sends: Frigate's 20 rows, the DeepStack route's boxes for the same frame in relative
    coordinates, best first, unused rows zero."""
    server, endpoint = serve_zmq(yolo.env, "--models", "yolo")
    client = None
    try:
        client = FrigateZmqClient(
            endpoint, "/config/model_cache/yolov8n.cix", "yologeneric", request_timeout_ms=5000
        )
        assert client.model_ready, client.logged
        nchw = frame(np.random.default_rng(1), (1, 3, 640, 640))
        rows = client.detect_raw(nchw)
        assert rows.shape == (20, 6) and rows.dtype == np.float32
        found = rows_of(rows)
        assert [(c, round(s, 2)) for c, s, _ in found] == [(0, 0.9), (5, 0.8)]
        assert not rows[len(found) :].any()
        for _, _, (y1, x1, y2, x2) in found:
            assert 0 <= x1 < x2 <= 1 and 0 <= y1 < y2 <= 1
        picture = tmp_path / "frame.png"
        Image.fromarray(nchw[0].transpose(1, 2, 0)[:, :, ::-1]).save(picture)  # BGR planes
        status, answer = curl_form(server, "/v1/vision/detection", f"image=@{picture}")
        assert status == 200
        for row, prediction in zip(found, answer["predictions"], strict=True):
            box = [prediction[k] / 640 for k in ("y_min", "x_min", "y_max", "x_max")]
            assert row[2] == pytest.approx(box, abs=1 / 640)
            assert row[1] == pytest.approx(prediction["confidence"], abs=1e-3)
        assert detections(rows, COCO80)[0][0] == "class 0"
        nhwc = np.ascontiguousarray(nchw.transpose(0, 2, 3, 1))
        assert np.array_equal(client.detect_raw(nhwc), rows)
        as_float = client.detect_raw(nchw.astype(np.float32) / 255)
        assert np.array_equal(as_float, rows)
        assert client.reconnects == 0 and not client.logged
        metrics = server.request("GET", "/metrics").body.decode()
        assert 'npuctl_serve_requests_total{code="200",endpoint="zmq"} 3.0' in metrics
        assert 'npuctl_serve_model_requests_total{model="yolov8n",outcome="ok"} 4.0' in metrics
    finally:
        if client is not None:
            client.close()
        assert server.stop() == 0
    assert "Traceback" not in server.stderr
    assert re.search(
        r"yolov8n answers to model.path .*yolov8n.*model_type yolo-generic", server.stderr
    )


def test_a_model_frigate_names_that_is_not_served_is_not_available(
    yolo: Board, tmp_path: Path
) -> None:
    server, endpoint = serve_zmq(yolo.env, "--models", "yolo")
    model = tmp_path / "rfdetr.onnx"
    model.write_bytes(b"Frigate's own model file")
    try:
        client = FrigateZmqClient(endpoint, str(model), "rfdetr")
        assert not client.model_ready
        assert "Model transfer failed: saved=False, loaded=False" in client.logged
        assert "uploads are not taken here" in server.stderr
        client.close()
    finally:
        assert server.stop() == 0


def test_frigates_timeout_reconnect_and_model_request_are_answered(yolo: Board) -> None:
    """An NPU slower than Frigate's 200 ms: the frame times out, Frigate makes a new socket
    and asks for the model again at once, and that is answered while the old frame still
    runs; the next frame, given time, is answered."""
    server, endpoint = serve_zmq({**yolo.env, "NOE_DOUBLE_INFER_MS": "600"}, "--models", "yolo")
    try:
        client = FrigateZmqClient(endpoint, "yolov8n.cix", "yologeneric")
        assert client.model_ready
        began = time.monotonic()
        assert not client.detect_raw(frame(np.random.default_rng(2), (1, 3, 640, 640))).any()
        assert client.reconnects == 1 and client.model_ready, client.logged
        assert time.monotonic() - began < 0.6  # the new model request did not wait the NPU
        client.socket.setsockopt(zmq.RCVTIMEO, 10_000)
        assert client.detect_raw(frame(np.random.default_rng(3), (1, 3, 640, 640)))[0, 1] > 0
        client.close()
    finally:
        assert server.stop() == 0
    assert "Traceback" not in server.stderr


def test_a_hung_npu_leaves_the_endpoint_answering(yolo: Board, tmp_path: Path) -> None:
    """The NPU stops answering: frames time out, Frigate's reconnects and model requests
    are still answered, /health says the NPU hangs, and SIGTERM still stops the server."""
    hang = tmp_path / "hang"
    env = {**yolo.env, "NOE_DOUBLE_HANG_FILE": str(hang)}
    server, endpoint = serve_zmq(env, "--models", "yolo", "--deadline", "1")
    try:
        client = FrigateZmqClient(endpoint, "yolov8n.cix", "yologeneric")
        hang.touch()
        for seed in range(3):
            assert not client.detect_raw(frame(np.random.default_rng(seed), (1, 3, 640, 640))).any()
        assert client.reconnects == 3 and client.model_ready, client.logged
        deadline = time.monotonic() + 30
        while server.request("GET", "/health").status == 200 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert server.request("GET", "/health").json()["status"] == "unhealthy"
        client.close()
    finally:
        assert server.stop(120) == 0


def test_the_model_request_waits_while_the_models_load(yolo: Board) -> None:
    server, endpoint = serve_zmq(
        {**yolo.env, "NOE_DOUBLE_LOAD_MS": "2000"}, "--models", "yolo", wait=False
    )
    try:
        assert server.listening.wait(60) and server.ready_at is None, server.stderr
        client = FrigateZmqClient(endpoint, "yolov8n.cix", "yologeneric", request_timeout_ms=5000)
        assert client.model_ready, client.logged
        assert server.ready.wait(60)
        assert client.detect_raw(frame(np.random.default_rng(4), (1, 3, 640, 640)))[0, 1] > 0
        client.close()
    finally:
        assert server.stop() == 0


# -- the RK3588: SSD over ipc:// -----------------------------------------------------------
def test_rocket_answers_frigate_over_ipc_as_deepstack_does(rocket_models, tmp_path: Path) -> None:
    socket_path = tmp_path / "cache" / "zmq_detector"
    env = {**rocket_models.env, "NPUCTL_PLATFORM": "rocket"}
    server = start(env, "--models", "ssdlite", "--zmq", f"ipc://{socket_path}")
    try:
        shape = server.request("GET", "/v2/models/ssdlite").json()["inputs"][0]["shape"]
        client = FrigateZmqClient(
            f"ipc://{socket_path}", "/config/ssdlite_mobiledet.tflite", "ssd", 5000
        )
        assert client.model_ready, client.logged
        pixels = frame(np.random.default_rng(9), tuple(shape))
        rows = client.detect_raw(pixels)
        picture = tmp_path / "frame.png"
        Image.fromarray(pixels[0]).save(picture)
        status, answer = curl_form(
            server, "/v1/vision/detection", f"image=@{picture}", "min_confidence=0.4"
        )
        assert status == 200
        found = rows_of(rows)
        assert len(found) == len(answer["predictions"])
        size = shape[1]
        for row, prediction in zip(found, answer["predictions"], strict=True):
            box = [prediction[k] / size for k in ("y_min", "x_min", "y_max", "x_max")]
            assert row[2] == pytest.approx(box, abs=1 / size)
        client.close()
        assert socket_path.exists()
    finally:
        assert server.stop() == 0
    assert not socket_path.exists()


# -- uploads -------------------------------------------------------------------------------
def test_an_allowed_upload_is_proven_served_and_told(yolo: Board, tmp_path: Path) -> None:
    """With --zmq-uploads, Frigate's model file is proven in a child, loaded and served under
    its name; a file that crashes the library in the child is deleted, not served; both
    are logged with the peer's address and recorded for npuctl doctor."""
    uploads = tmp_path / "uploads"
    runtime = tmp_path / "run"
    raw = tmp_path / "other-output.bin"
    raw.write_bytes(synthetic_output([(2, 0.7, 320, 320, 100, 100)]).tobytes())
    (tmp_path / "cache").mkdir()
    upload = write_model(
        tmp_path / "cache" / "mine.cix", ["U8 1228800 255.0 0"], [f"F16 1411200 1.0 0 {raw}"]
    )
    broken = tmp_path / "cache" / "broken.cix"
    broken.write_text("not a model\n")
    server = start(
        yolo.env, "--models", "yolo", "--zmq", f"ipc://{tmp_path / 'z.sock'}",
        "--zmq-uploads", str(uploads), socket_path=runtime / "serve.sock",
    )  # fmt: skip
    try:
        client = FrigateZmqClient(f"ipc://{tmp_path / 'z.sock'}", str(upload), "yologeneric", 5000)
        assert client.model_ready, client.logged
        rows = client.detect_raw(frame(np.random.default_rng(5), (1, 3, 640, 640)))
        assert [(c, round(s, 2)) for c, s, _ in rows_of(rows)] == [(2, 0.7)]
        assert (uploads / "from-unix" / "mine.cix").read_bytes() == upload.read_bytes()
        client.close()
        refused = FrigateZmqClient(f"ipc://{tmp_path / 'z.sock'}", str(broken), "yologeneric", 5000)
        assert not refused.model_ready
        assert "Model transfer failed: saved=False, loaded=False" in refused.logged
        kept = sorted(p.name for p in (uploads / "from-unix").iterdir())
        assert kept == ["mine.cix"]  # unproven: deleted
        refused.close()
        assert server.request("GET", "/ready").status == 200
        record = json.loads((runtime / "frigate-uploads.json").read_text())
        assert [(r["name"], r["loaded"], r["peer"]) for r in record] == [
            ("mine.cix", True, "unix"),
            ("broken.cix", False, "unix"),
        ]
    finally:
        assert server.stop() == 0
    assert re.search(
        r"unix uploaded mine.cix \(\d+ bytes\): proven, loaded and served", server.stderr
    )
    assert "unix uploaded broken.cix" in server.stderr and "crashed libnoe" in server.stderr
    assert "Traceback" not in server.stderr


# -- what an attacker sends -------------------------------------------------------------
def test_every_malformed_request_gets_an_answer_and_one_log_line(yolo: Board) -> None:
    server, endpoint = serve_zmq(yolo.env, "--models", "yolo")
    port = int(endpoint.rsplit(":", 1)[1])
    header = {"shape": [1, 3, 640, 640], "dtype": "uint8", "model_type": "yologeneric"}
    tensor = bytes(1228800)
    cases = [
        ((b"not json", tensor), "not_json"),
        ((json.dumps({**header, "shape": [1, 3, 320, 320]}).encode(), tensor), "wrong_shape"),
        ((json.dumps({**header, "dtype": "int64"}).encode(), tensor), "wrong_dtype"),
        ((json.dumps({**header, "model_type": "ssd"}).encode(), tensor), "wrong_model_type"),
        ((json.dumps(header).encode(), tensor[:1000]), "wrong_size"),
        ((json.dumps(header).encode(), tensor + b"x"), "too_large"),
        ((json.dumps(header).encode(), tensor, b"extra"), "too_large"),
        ((json.dumps(header).encode(),), "no_tensor"),
    ]
    try:
        for frames, kind in cases * 2:
            peer = raw_peer(port)
            send_frames(peer, *frames)
            answer = json.loads(answer_of(peer))
            assert answer["kind"] == kind, (frames[0][:60], answer)
            peer.close()
        good = raw_peer(port)
        send_frames(good, json.dumps(header).encode(), tensor)
        assert len(answer_of(good)) == 480
        good.close()
    finally:
        assert server.stop() == 0
    for _, kind in cases:
        said = [line for line in server.lines if kind.replace("_", " ") + " from" in line]
        assert len(said) == 1, (kind, said)
    assert "Traceback" not in server.stderr


def test_an_endless_message_and_garbage_are_closed_not_kept(yolo: Board) -> None:
    """A ZMTP peer that sends frames with MORE and never a last one (libzmq's sockets keep
    all of it) is closed at its first frame over the limit, after reading it away within
    the message timeout; the memory stays; bytes that are no ZMTP are closed at once."""
    server, endpoint = serve_zmq(yolo.env, "--models", "yolo", "--body-timeout", "3")
    port = int(endpoint.rsplit(":", 1)[1])
    try:
        before = rss_mib(server.process.pid)
        peer = raw_peer(port)
        part = struct.pack(">BQ", 0x03, 1 << 20) + b"x" * (1 << 20)
        sent, started = 0, time.monotonic()
        with pytest.raises(OSError):
            while time.monotonic() - started < 20:
                peer.sendall(part)
                sent += 1
        assert rss_mib(server.process.pid) - before < 64, sent
        garbage = socket.create_connection(("127.0.0.1", port), timeout=10)
        garbage.sendall(b"GET / HTTP/1.1\r\n\r\n" + b"\0" * 100)
        assert garbage.recv(4096)[:1] in (b"\xff", b"")  # our greeting, then closed
        garbage.close()
        client = FrigateZmqClient(endpoint, "yolov8n.cix", "yologeneric", 5000)
        assert client.detect_raw(frame(np.random.default_rng(6), (1, 3, 640, 640)))[0, 1] > 0
        client.close()
    finally:
        assert server.stop() == 0
    assert "Traceback" not in server.stderr


LIBZMQ_ROUTER = """
import sys, time, zmq
socket = zmq.Context().socket(zmq.ROUTER)
socket.setsockopt(zmq.MAXMSGSIZE, 2_000_000)
socket.setsockopt(zmq.RCVHWM, 2)
port = socket.bind_to_random_port("tcp://127.0.0.1")
print(port, flush=True)
time.sleep(60)
"""


def test_libzmq_keeps_an_endless_message(tmp_path: Path) -> None:
    """Why the server speaks ZMTP itself (docs/development.md): a libzmq ROUTER, its message
    size and high-water mark set, keeps every frame of a multipart message that never ends.
    Should a libzmq bound it, this fails, and the server could use pyzmq instead."""
    import subprocess
    import sys

    router = subprocess.Popen(
        [sys.executable, "-c", LIBZMQ_ROUTER], stdout=subprocess.PIPE, text=True
    )
    try:
        port = int(router.stdout.readline())  # type: ignore[union-attr]
        before = rss_mib(router.pid)
        peer = raw_peer(port, expect_reply=False)
        part = struct.pack(">BQ", 0x03, 1 << 20) + b"x" * (1 << 20)
        for _ in range(200):
            peer.sendall(part)
        deadline = time.monotonic() + 30
        while rss_mib(router.pid) - before < 150 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert rss_mib(router.pid) - before >= 150
        peer.close()
    finally:
        router.kill()
        router.wait()


def test_who_may_connect(yolo: Board) -> None:
    """A tcp:// endpoint on every address says so at start; --zmq-allow closes the others."""
    port = free_port()
    server = start(
        yolo.env, "--models", "yolo", "--zmq", f"tcp://*:{port}", "--zmq-allow", "10.0.0.0/8"
    )
    try:
        assert (
            "unauthenticated (Frigate's client sends no credentials), reachable from 10.0.0.0/8"
            in server.stderr
        )
        client = FrigateZmqClient(f"tcp://127.0.0.1:{port}", "yolov8n.cix", "yologeneric", 300)
        assert not client.model_ready
        client.close()
    finally:
        assert server.stop() == 0
    assert "refused from 127.0.0.1: not in the allowed addresses" in server.stderr
    open_server = start(yolo.env, "--models", "yolo", "--zmq", f"tcp://*:{free_port()}")
    try:
        assert (
            "reachable from every address that reaches it: give --zmq-allow" in open_server.stderr
        )
        if ipv6_here():  # tcp://* takes IPv6 too, and says so
            assert re.search(r"tcp://0\.0\.0\.0:\d+ and tcp://\[::\]:\d+", open_server.stderr)
    finally:
        assert open_server.stop() == 0


def ipv6_here() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::", 0))
    except OSError:
        return False
    return True


def test_a_bad_endpoint_is_one_line(yolo: Board) -> None:
    result = yolo.npuctl("serve", "--port", "0", "--zmq", "udp://x:1")
    assert result.returncode == 2 and "tcp://HOST:PORT or ipc://PATH" in result.stderr
