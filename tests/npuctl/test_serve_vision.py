"""npuctl serve as the board's inference server, with the clients users have: curl posting a
form as Frigate's deepstack detector does, Triton's official client over the open inference
protocol, the OpenAI client; on the Zhouyi (libnoe double) and on the RK3588 (Teflon double,
models built at test time)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from testkit.serve_process import Server, start
from testkit.yolo_outputs import synthetic_output

from .conftest import Board

KEY = "s3cret-key-for-tests"


def curl_form(
    server: Server, path: str, *fields: str, headers: tuple[str, ...] = ()
) -> tuple[int, dict]:
    """POST a multipart form with curl, as DeepStack clients send it."""
    command = ["curl", "-sS", "-o", "-", "-w", "\n%{http_code}", f"{server.url}{path}"]
    for field in fields:
        command += ["-F", field]
    for header in headers:
        command += ["-H", header]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    body, _, status = result.stdout.rpartition("\n")
    return int(status), json.loads(body)


@pytest.fixture
def yolo_board(board: Board, tmp_path: Path) -> Board:
    raw = tmp_path / "yolo-output.bin"
    raw.write_bytes(
        synthetic_output([(0, 0.9, 200, 330, 120, 400), (5, 0.8, 400, 300, 300, 200)]).tobytes()
    )
    board.model("yolov8n.cix", ["U8 1228800 255.0 0"], [f"F16 1411200 1.0 0 {raw}"])
    return board


@pytest.fixture
def yolo_server(yolo_board: Board):
    running = start(yolo_board.env, "--models", "yolo")
    yield running
    assert running.stop() == 0


def test_deepstack_detection_answers_what_run_yolo_finds(yolo_board, yolo_server, bus_jpg):
    status, answer = curl_form(
        yolo_server, "/v1/vision/detection", f"image=@{bus_jpg}", "min_confidence=0.5"
    )
    assert status == 200 and answer["success"] is True
    run = yolo_board.npuctl_json("run", "yolo", str(bus_jpg), "--conf", "0.5")
    assert [p["label"] for p in answer["predictions"]] == [d["label"] for d in run["detections"]]
    assert {p["label"] for p in answer["predictions"]} == {"person", "bus"}
    for prediction, detection in zip(answer["predictions"], run["detections"], strict=True):
        box = [prediction[k] for k in ("x_min", "y_min", "x_max", "y_max")]
        # the original image's pixels ('run' rounds to 0.1 first)
        assert box == pytest.approx(detection["box"], abs=0.6)
        assert prediction["confidence"] == pytest.approx(detection["score"], abs=1e-3)
        assert 0 <= box[0] < box[2] <= 810 and 0 <= box[1] < box[3] <= 1080
    status, high = curl_form(
        yolo_server, "/v1/vision/detection", f"image=@{bus_jpg}", "min_confidence=0.99"
    )
    assert status == 200 and high["predictions"] == []
    metrics = yolo_server.request("GET", "/metrics").body.decode()
    assert 'npuctl_serve_model_requests_total{model="yolov8n",outcome="ok"} 2.0' in metrics
    assert 'npuctl_serve_model_duration_seconds_count{model="yolov8n"}' in metrics


def test_each_answer_says_where_its_time_went(yolo_board, bus_jpg):
    """Server-Timing, as curl -D and a browser's network panel show it."""
    server = start({**yolo_board.env, "NOE_DOUBLE_INFER_MS": "20"}, "--models", "yolo")
    try:
        command = ["curl", "-sS", "-D", "-", "-o", "/dev/null", "-F", f"image=@{bus_jpg}"]
        result = subprocess.run(
            [*command, f"{server.url}/v1/vision/detection"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
    finally:
        assert server.stop() == 0
    (header,) = [
        line.partition(":")[2]
        for line in result.stdout.splitlines()
        if line.startswith("Server-") and line.lower().startswith("server-timing:")
    ]
    stages = {
        name.strip(): float(duration)
        for name, _, duration in (part.partition(";dur=") for part in header.split(","))
    }
    wall = ["decode", "preprocess", "queue", "npu", "postprocess"]
    assert list(stages) == [*wall, "total", "cpu"]
    assert stages["npu"] >= 20  # the double's inference, in milliseconds
    parts = sum(stages[name] for name in wall)
    assert parts <= stages["total"] < parts + 5
    # the thread waits for the NPU without spending CPU on it
    assert 0 < stages["cpu"] < stages["total"] - stages["npu"]


def test_bad_vision_requests_are_4xx_in_deepstack_shape_and_serving_goes_on(
    yolo_server, bus_jpg, tmp_path
):
    text = tmp_path / "notes.jpg"
    text.write_text("not a picture")
    bomb = tmp_path / "bomb.png"
    Image.new("1", (20000, 20000)).save(bomb)  # 400 million pixels in a few kilobytes
    cases = [
        (("image=@" + str(text),), 415, "not a JPEG, PNG, WebP or BMP image"),
        (("min_confidence=0.5",), 400, "no image"),
        ((f"image=@{bus_jpg}", "min_confidence=2"), 400, "min_confidence"),
        ((f"image=@{bomb}",), 400, "pixels, over the limit"),
    ]
    for fields, status, words in cases:
        got, answer = curl_form(yolo_server, "/v1/vision/detection", *fields)
        assert got == status and answer["success"] is False and answer["code"] == status
        assert words in answer["error"], answer
    not_form = yolo_server.request(
        "POST", "/v1/vision/detection", b"{}", headers={"Content-Type": "application/json"}
    )
    assert not_form.status == 400 and "not a form" in not_form.json()["error"]
    truncated = yolo_server.request(
        "POST",
        "/v1/vision/detection",
        b'--b\r\nContent-Disposition: form-data; name="image"\r\n\r\nabc',
        headers={"Content-Type": "multipart/form-data; boundary=b"},
    )
    assert truncated.status == 400 and "not well formed" in truncated.json()["error"]
    huge = yolo_server.request(
        "POST",
        "/v1/vision/detection",
        b"x" * (50 * 1024 * 1024),
        headers={"Content-Type": "multipart/form-data; boundary=b"},
    )
    assert huge.status == 413
    none = yolo_server.request(
        "POST",
        "/v1/vision/classification",
        b"--b--\r\n",
        headers={"Content-Type": "multipart/form-data; boundary=b"},
    )
    assert none.status == 400  # no image, before the missing classifier is looked for
    status, answer = curl_form(yolo_server, "/v1/vision/classification", f"image=@{bus_jpg}")
    assert status == 404 and "no classification model" in answer["error"]
    status, answer = curl_form(yolo_server, "/v1/vision/detection", f"image=@{bus_jpg}")
    assert status == 200 and answer["predictions"]  # still serving


def test_tritonclient_calls_every_model(clip_board, tmp_path):
    httpclient = pytest.importorskip("tritonclient.http", reason="tritonclient is a dev dependency")
    raw = tmp_path / "yolo-output.bin"
    canned = synthetic_output([(0, 0.9, 200, 330, 120, 400)])
    raw.write_bytes(canned.tobytes())
    clip_board.model("yolov8n.cix", ["U8 1228800 255.0 0"], [f"F16 1411200 1.0 0 {raw}"])
    server = start(clip_board.env)
    try:
        client = httpclient.InferenceServerClient(f"127.0.0.1:{server.port}")
        assert client.is_server_live() and client.is_server_ready()
        assert client.is_model_ready("yolov8n") and client.is_model_ready("clip-text")
        metadata = client.get_model_metadata("yolov8n")
        assert metadata["inputs"] == [
            {"name": "images", "datatype": "UINT8", "shape": [1, 3, 640, 640]}
        ]
        assert metadata["outputs"] == [
            {"name": "output0", "datatype": "FP16", "shape": [1, 84, 8400]}
        ]
        image = httpclient.InferInput("images", [1, 3, 640, 640], "UINT8")
        image.set_data_from_numpy(np.full((1, 3, 640, 640), 114, np.uint8))  # binary by default
        result = client.infer("yolov8n", [image])
        assert np.array_equal(result.as_numpy("output0").reshape(84, -1), canned)
        # JSON tensors both ways give the same numbers as an embedding request
        tokens = np.zeros((1, 77), np.int32)
        tokens[0, :4] = [49406, 320, 1929, 49407]
        ids = httpclient.InferInput("input_ids", [1, 77], "INT32")
        ids.set_data_from_numpy(tokens, binary_data=False)
        out = httpclient.InferRequestedOutput("embedding", binary_data=False)
        as_json = client.infer("clip-text", [ids], outputs=[out]).as_numpy("embedding")
        ids.set_data_from_numpy(tokens, binary_data=True)
        as_binary = client.infer("clip-text", [ids]).as_numpy("embedding")
        assert as_json.shape == (1, 512) and np.array_equal(as_json, as_binary)
        embedded = server.embed({"input": [[320, 1929]]}).json()["data"][0]["embedding"]
        dequantized = (as_json.astype(np.float32).ravel() + 60) / 27.67  # libnoe's convention
        np.testing.assert_allclose(
            np.array(embedded), dequantized / np.linalg.norm(dequantized), atol=1e-5
        )
        with pytest.raises(Exception, match="no input"):
            wrong = httpclient.InferInput("pixels", [1, 77], "INT32")
            wrong.set_data_from_numpy(tokens)
            client.infer("clip-text", [wrong])
        with pytest.raises(Exception, match="INT32, not FP32"):
            wrong = httpclient.InferInput("input_ids", [1, 77], "FP32")
            wrong.set_data_from_numpy(tokens.astype(np.float32))
            client.infer("clip-text", [wrong])
        with pytest.raises(Exception, match="shape"):
            wrong = httpclient.InferInput("input_ids", [1, 76], "INT32")
            wrong.set_data_from_numpy(tokens[:, :76])
            client.infer("clip-text", [wrong])
        with pytest.raises(Exception, match="no model 'resnet'"):
            client.get_model_metadata("resnet")
        assert client.is_server_ready()
    finally:
        assert server.stop() == 0


def test_api_key_guards_every_api_in_its_own_shape(yolo_board, bus_jpg, tmp_path):
    key_file = tmp_path / "key"
    key_file.write_text(KEY + "\n")
    server = start(yolo_board.env, "--api-key-file", str(key_file))
    try:
        assert server.request("GET", "/health").status == 200  # public by default
        assert server.request("GET", "/v2/health/ready").status == 200
        denied = server.request("GET", "/metrics")
        assert denied.status == 401 and denied.headers["WWW-Authenticate"] == "Bearer"
        assert denied.json()["error"]["code"] == "invalid_api_key"  # OpenAI's shape
        v2 = server.request("GET", "/v2/models/yolov8n")
        assert v2.status == 401 and set(v2.json()) == {"error"}
        wrong = server.request(
            "GET", "/v2/models/yolov8n", headers={"Authorization": "Bearer nope"}
        )
        assert wrong.status == 401
        right = server.request(
            "GET", "/v2/models/yolov8n", headers={"Authorization": f"Bearer {KEY}"}
        )
        assert right.status == 200
        status, answer = curl_form(server, "/v1/vision/detection", f"image=@{bus_jpg}")
        assert status == 401 and answer["success"] is False and answer["code"] == 401
        status, answer = curl_form(
            server, "/v1/vision/detection", f"image=@{bus_jpg}", f"api_key={KEY}"
        )
        assert status == 200 and answer["predictions"]
        status, answer = curl_form(
            server,
            "/v1/vision/detection",
            f"image=@{bus_jpg}",
            headers=(f"Authorization: Bearer {KEY}",),
        )
        assert status == 200
    finally:
        assert server.stop() == 0
    assert "without an API key" not in server.stderr


def test_api_key_from_systemd_credentials_and_the_open_listener_warning(yolo_board, tmp_path):
    credentials = tmp_path / "credentials"
    credentials.mkdir()
    (credentials / "npuctl-serve-api-key").write_text(KEY)
    env = {**yolo_board.env, "CREDENTIALS_DIRECTORY": str(credentials)}
    server = start(env, "--public", "health,metrics")
    try:
        assert server.request("GET", "/metrics").status == 200
        assert server.request("GET", "/v2").status == 401
    finally:
        assert server.stop() == 0
    open_server = start(yolo_board.env, "--host", "0.0.0.0")
    try:
        assert "without an API key" in open_server.stderr
    finally:
        assert open_server.stop() == 0
    empty = tmp_path / "empty"
    empty.write_text("\n")
    result = yolo_board.npuctl("serve", "--api-key-file", str(empty), "--port", "0")
    assert result.returncode == 2 and "one API key on one line" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_openapi_document_matches_the_routes_and_the_answers(yolo_board, clip_board, bus_jpg):
    jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is a dev dependency")
    from npuctl.serve.openapi import documented_path
    from npuctl.serve.protocols import HTTP

    server = start(clip_board.env)
    try:
        document = server.request("GET", "/openapi.json").json()
        assert document["openapi"].startswith("3.1")
        served = {documented_path(route) for api in HTTP for route in api.routes}
        assert set(document["paths"]) == served
        names = document["paths"]["/v2/models/{name}"]["get"]["parameters"][0]["schema"]["enum"]
        assert set(names) == {"yolov8n", "clip-text", "clip-visual"}
        schemas = document["components"]["schemas"]

        def check(path: str, method: str, answer) -> None:
            described = document["paths"][path][method]["responses"][str(answer.status)]
            content = described.get("content", {}).get("application/json")
            if content is not None:
                schema = {"$ref": content["schema"]["$ref"], "components": {"schemas": schemas}}
                jsonschema.validate(answer.json(), schema)

        check("/health", "get", server.request("GET", "/health"))
        check("/ready", "get", server.request("GET", "/ready"))
        check("/v1/models", "get", server.request("GET", "/v1/models"))
        check("/v1/embeddings", "post", server.embed({"input": "a cat"}))
        check("/v1/embeddings", "post", server.embed({"input": ""}))
        check("/v2", "get", server.request("GET", "/v2"))
        check("/v2/models/{name}", "get", server.request("GET", "/v2/models/yolov8n"))
        check("/v2/models/{name}", "get", server.request("GET", "/v2/models/nope"))
        infer = {
            "inputs": [
                {"name": "input_ids", "datatype": "INT32", "shape": [1, 77], "data": [0] * 77}
            ]
        }
        check(
            "/v2/models/{name}/infer",
            "post",
            server.request("POST", "/v2/models/clip-text/infer", infer),
        )
        check(
            "/v2/models/{name}/infer",
            "post",
            server.request("POST", "/v2/models/clip-text/infer", {"inputs": []}),
        )
        for path in document["paths"]:
            concrete = (
                path.replace("{name}", "yolov8n").replace("{model}", "clip-text")
                .replace("{version}", "1")
            )  # fmt: skip
            method = next(iter(document["paths"][path]))
            if method == "get":
                assert server.request("GET", concrete).status == 200, path
    finally:
        assert server.stop() == 0


# -- the RK3588: SSDLite and MobileNet through the Teflon double ----------------------------
@pytest.fixture
def street(tmp_path) -> Path:
    rng = np.random.default_rng(5)
    path = tmp_path / "street.jpg"
    Image.fromarray(rng.integers(0, 256, (240, 320, 3), dtype=np.uint8)).save(path, quality=95)
    return path


def test_run_ssdlite_on_the_npu_and_the_cpu_alike(rocket_models, street, tmp_path):
    npu = rocket_models.npuctl("run", "ssdlite", str(street), "--conf", "0.1", "--json")
    cpu = rocket_models.npuctl("run", "ssdlite", str(street), "--conf", "0.1", "--json", "--cpu")
    assert npu.returncode == 0 and cpu.returncode == 0, npu.stderr + cpu.stderr
    found, reference = json.loads(npu.stdout), json.loads(cpu.stdout)
    assert found["device"] == "npu" and found["detections"]
    assert found["detections"] == reference["detections"]
    for detection in found["detections"]:
        x1, y1, x2, y2 = detection["box"]
        assert 0 <= x1 <= x2 <= 320 and 0 <= y1 <= y2 <= 240
    annotated = tmp_path / "boxes.png"
    drawn = rocket_models.npuctl("run", "ssdlite", str(street), "--annotate", str(annotated))
    assert drawn.returncode == 0 and annotated.read_bytes()[:4] == b"\x89PNG"
    bad = rocket_models.npuctl("run", "ssdlite", str(tmp_path / "missing.jpg"))
    assert bad.returncode == 3 and len(bad.stderr.strip().splitlines()) == 1


def test_rocket_serves_detection_and_classification_with_workers(rocket_models, street):
    env = {**rocket_models.env, "NPUCTL_PLATFORM": "rocket"}
    server = start(env, "--models", "ssdlite,mobilenet,mobilenet-v2", "--workers", "2")
    try:
        status, answer = curl_form(
            server, "/v1/vision/detection", f"image=@{street}", "min_confidence=0.1"
        )
        run = rocket_models.npuctl("run", "ssdlite", str(street), "--conf", "0.1", "--json")
        expected = json.loads(run.stdout)["detections"]
        assert status == 200 and len(answer["predictions"]) == len(expected) > 0
        for prediction, detection in zip(answer["predictions"], expected, strict=True):
            assert prediction["label"] == detection["label"]
            box = [prediction[k] for k in ("x_min", "y_min", "x_max", "y_max")]
            assert box == pytest.approx(detection["box"], abs=0.6)
        status, classes = curl_form(
            server, "/v1/vision/classification", f"image=@{street}", "top_k=3"
        )
        run = rocket_models.npuctl("run", "mobilenet", str(street), "-k", "3", "--json")
        top = json.loads(run.stdout)["images"][0]["top"]
        assert status == 200 and [p["label"] for p in classes["predictions"]] == [
            t["label"] for t in top
        ]
        assert classes["label"] == top[0]["label"]
        metadata = server.request("GET", "/v2/models/mobilenet-v2").json()
        assert metadata["inputs"][0]["datatype"] == "UINT8" and metadata["inputs"][0]["shape"] == [
            1,
            8,
            8,
            3,
        ]
        outputs = {o["name"] for o in server.request("GET", "/v2/models/ssdlite").json()["outputs"]}
        assert "TFLite_Detection_PostProcess:3" in outputs
        pixels = np.asarray(Image.open(street).convert("RGB").resize((8, 8), Image.BILINEAR))
        infer = {
            "inputs": [
                {
                    "name": metadata["inputs"][0]["name"],
                    "datatype": "UINT8",
                    "shape": [1, 8, 8, 3],
                    "data": pixels.ravel().tolist(),
                }
            ]
        }
        answer = server.request("POST", "/v2/models/mobilenet-v2/infer", infer)
        assert answer.status == 200 and answer.json()["outputs"][0]["shape"] == [1, 1001]
        assert server.request("POST", "/v1/embeddings", {"input": "x"}).status == 404
    finally:
        assert server.stop() == 0


def test_rocket_refuses_what_it_cannot_serve(rocket_models):
    wrong = rocket_models.npuctl("--platform", "rocket", "serve", "--models", "yolo", "--port", "0")
    assert wrong.returncode == 2 and "no model 'yolo' on this NPU" in wrong.stderr
    (rocket_models.models / "ssdlite_mobiledet_coco_qat_postprocess.tflite").unlink()
    missing = rocket_models.npuctl(
        "--platform", "rocket", "serve", "--models", "ssdlite", "--port", "0"
    )
    assert missing.returncode == 4 and "npuctl models fetch ssdlite" in missing.stderr


def test_zhouyi_takes_one_worker(yolo_board):
    result = yolo_board.npuctl("serve", "--workers", "2", "--port", "0")
    assert result.returncode == 2 and "one worker" in result.stderr


def test_rocket_names_the_served_model_that_does_not_load(rocket_models):
    """The served models are proven in one child; when one of them fails there, each is
    proven alone and the one that fails is named, with the runtime's reason."""
    broken = rocket_models.models / "mobilenet_v2_1.0_224_quant.tflite"
    broken.write_bytes(b"\x1c\x00\x00\x00TFL3" + bytes(64))
    result = rocket_models.npuctl(
        "--platform", "rocket", "serve", "--models", "ssdlite,mobilenet,mobilenet-v2",
        "--port", "0",
    )  # fmt: skip
    assert result.returncode == 4, result.stderr
    (line,) = [line for line in result.stderr.splitlines() if "npuctl" in line and "load" in line]
    assert str(broken) in line and "does not load" in line, result.stderr
    assert "Traceback" not in result.stderr


# Per Teflon, from teflon.yaml (derived from what real boards compute, hardware.yaml): what
# each served model gets wrong there, and whether the wanted Teflon computes it.
SERVE_WARNINGS = {
    "26.1.6-1~bpo13+1": {
        "mobilenet-v2": (
            "packs each kernel as wide",
            "npuctl doctor says how to install Mesa 26.2",
        ),
        "ssdlite": ("SSDLite MobileDet as published (086 and 087)", "no Mesa release npuctl knows"),
    },
    "26.2.6-1": {
        "ssdlite": ("SSDLite MobileDet as published (086 and 087)", "no Mesa release npuctl knows"),
    },
}


@pytest.mark.parametrize("installed", sorted(SERVE_WARNINGS))
def test_rocket_says_which_served_model_the_installed_teflon_computes_wrongly(
    rocket_models, tmp_path, installed
):
    """On a board whose Teflon real boards show computing a served model wrongly (teflon.yaml),
    serving it logs one line naming the model, the Teflon, what goes wrong and either what to
    install or that no Mesa release computes it; the model is served as asked, and a model
    the boards compute right under that Teflon is not named."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    dpkg_query = bin_dir / "dpkg-query"
    dpkg_query.write_text(f"#!/bin/sh\nprintf %s '{installed}'\n")
    dpkg_query.chmod(0o755)
    env = {
        **rocket_models.env,
        "NPUCTL_PLATFORM": "rocket",
        "PATH": f"{bin_dir}:{rocket_models.env.get('PATH', '')}",
    }
    server = start(env, "--models", "mobilenet,mobilenet-v2,ssdlite")
    try:
        for name in ("mobilenet", "mobilenet-v2", "ssdlite"):
            assert server.request("GET", f"/v2/models/{name}/ready").status == 200
    finally:
        assert server.stop() == 0
    lines = [line for line in server.stderr.splitlines() if "Mesa Teflon" in line]
    warned = {
        name: line
        for line in lines
        for name in SERVE_WARNINGS[installed]
        if f"{name}: Mesa Teflon {installed}" in line
    }
    assert sorted(warned) == sorted(SERVE_WARNINGS[installed]), lines
    assert len(lines) == len(warned), lines
    for name, (what, then) in SERVE_WARNINGS[installed].items():
        assert what in warned[name] and then in warned[name], warned[name]
