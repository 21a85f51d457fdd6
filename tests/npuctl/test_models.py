"""npuctl models list / fetch / verify against a local HTTP server (never the internet)."""

import hashlib
import http.server
import json
import threading
from pathlib import Path

import pytest
import yaml

from .test_cli_run import one_line_error

MODEL_BYTES = b"NOEDOUBLE 1\ninput S32 308 1.0 0\noutput S8 512 27.67 60\n" + b"#" * 200_000
VOCAB_BYTES = b"vocabulary bytes " * 1000


class Server:
    """Serves files with HTTP Range support; can cut a response short once, or send a Git
    LFS pointer instead of the file."""

    def __init__(self, files: dict[str, bytes]) -> None:
        self.files = files
        self.ranges: list[str] = []
        self.cut_once: dict[str, int] = {}  # file -> bytes sent before the connection drops
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                body = server.files.get(self.path.lstrip("/"))
                if body is None:
                    self.send_error(404)
                    return
                start = 0
                range_header = self.headers.get("Range")
                if range_header:
                    server.ranges.append(range_header)
                    start = int(range_header.split("=")[1].split("-")[0])
                    if start >= len(body):
                        self.send_error(416)
                        return
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
                else:
                    self.send_response(200)
                self.send_header("Content-Length", str(len(body) - start))
                self.end_headers()
                payload = body[start:]
                cut = server.cut_once.pop(self.path.lstrip("/"), None)
                if cut is not None:
                    payload = payload[:cut]
                self.wfile.write(payload)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.httpd.server_port}/{name}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    serving = Server(
        {
            "model.cix": MODEL_BYTES,
            "vocab.gz": VOCAB_BYTES,
            "pointer.cix": b"version https://git-lfs.github.com/spec/v1\n"
            b"oid sha256:0\nsize 71000000\n",
        }
    )
    yield serving
    serving.close()


@pytest.fixture
def manifest(board, server, tmp_path):
    document = {
        "schema": 1,
        "platform": "zhouyi",
        "models": {
            "clip-text": {
                "file": "clip_txt.cix",
                "url": server.url("model.cix"),
                "sha256": None,
                "needs": ["clip-bpe-vocab"],
                "inputs": [{"elements": 77}],
                "outputs": [{"elements": 512}],
            },
            "lfs-model": {"file": "lfs.cix", "url": server.url("pointer.cix"), "sha256": None},
        },
        "assets": {
            "clip-bpe-vocab": {
                "file": "bpe.txt.gz",
                "url": server.url("vocab.gz"),
                "size": len(VOCAB_BYTES),
                "sha256": hashlib.sha256(VOCAB_BYTES).hexdigest(),
            },
        },
    }
    path = tmp_path / "models.yaml"
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    board.env["NPUCTL_MANIFEST"] = str(path)
    return document


def test_fetch_downloads_needs_first_and_pins_unpinned_models(board, manifest):
    result = board.npuctl_json("models", "fetch", "clip-text")
    assert [f["name"] for f in result["fetched"]] == ["clip-bpe-vocab", "clip-text"]
    assert (board.models / "clip_txt.cix").read_bytes() == MODEL_BYTES
    assert not list(board.models.glob("*.part"))
    lock = json.loads((board.models / "models.lock.json").read_text())
    assert lock["files"]["clip-text"]["sha256"] == hashlib.sha256(MODEL_BYTES).hexdigest()
    assert "clip-bpe-vocab" not in lock["files"]  # published checksum, nothing to record
    listed = {e["name"]: e for e in board.npuctl_json("models", "list")["entries"]}
    assert listed["clip-text"]["checksum"] == "recorded"
    assert listed["clip-bpe-vocab"]["checksum"] == "published"


def test_second_fetch_is_a_no_op(board, manifest, server):
    board.npuctl_json("models", "fetch", "clip-text")
    again = board.npuctl_json("models", "fetch", "clip-text")
    assert {f["state"] for f in again["fetched"]} == {"present"}


def test_interrupted_download_resumes(board, manifest, server):
    server.cut_once["model.cix"] = 50_000
    first = board.npuctl("models", "fetch", "clip-text")
    # the vocabulary arrived whole; the model broke off and must be resumed
    assert "resume" in one_line_error(first, 6)
    partial = board.models / "clip_txt.cix.part"
    assert partial.exists() and not (board.models / "clip_txt.cix").exists()
    board.npuctl_json("models", "fetch", "clip-text")
    assert server.ranges and server.ranges[-1].startswith("bytes=")
    assert (board.models / "clip_txt.cix").read_bytes() == MODEL_BYTES
    assert not partial.exists()


def test_checksum_mismatch_discards_the_download(board, manifest, server, tmp_path):
    manifest["assets"]["clip-bpe-vocab"]["sha256"] = "0" * 64
    Path(board.env["NPUCTL_MANIFEST"]).write_text(yaml.safe_dump(manifest))
    line = one_line_error(board.npuctl("models", "fetch", "clip-bpe-vocab"), 6)
    assert "does not match" in line
    assert list(board.models.iterdir()) == []


def test_lfs_pointer_is_reported_as_such(board, manifest):
    line = one_line_error(board.npuctl("models", "fetch", "lfs-model"), 6)
    assert "Git LFS pointer" in line
    assert not (board.models / "lfs.cix").exists()


def test_verify_detects_a_changed_file(board, manifest):
    board.npuctl_json("models", "fetch", "clip-text")
    checks = {c["name"]: c["state"] for c in board.npuctl_json("models", "verify")["checks"]}
    assert checks == {"clip-text": "ok", "clip-bpe-vocab": "ok", "lfs-model": "missing"}
    (board.models / "clip_txt.cix").write_bytes(MODEL_BYTES + b"tampered")
    line = one_line_error(board.npuctl("models", "verify", "clip-text"), 4)
    assert "failed verification" in line


def test_unreachable_server(board, manifest, server):
    server.close()
    line = one_line_error(board.npuctl("models", "fetch", "clip-bpe-vocab"), 6)
    assert "cannot download clip-bpe-vocab" in line


def test_unknown_name(board, manifest):
    assert "unknown model" in one_line_error(board.npuctl("models", "fetch", "gpt5"), 2)


def test_the_shipped_manifest_describes_each_platforms_models():
    from npuctl.models.manifest import load_manifest

    manifest = load_manifest()
    zhouyi = manifest.models_of("zhouyi")
    assert {m.name for m in zhouyi} == {"clip-text", "clip-visual", "yolov8n"}
    assert all(m.url.startswith("https://modelscope.cn/models/cix/") for m in zhouyi)
    rocket = {m.name: m for m in manifest.models_of("rocket")}
    assert set(rocket) == {"mobilenet", "mobilenet-v2", "ssdlite"}  # Teflon's fully supported
    assert rocket["mobilenet"].file == "mobilenet_v1_1.0_224_quant.tflite"
    assert rocket["mobilenet"].needs == rocket["mobilenet-v2"].needs == ("mobilenet-labels",)
    assert rocket["ssdlite"].file == "ssdlite_mobiledet_coco_qat_postprocess.tflite"
    assert rocket["ssdlite"].inputs[0].elements == 320 * 320 * 3
    assert {m.platform for m in manifest.entries.values()} == {"zhouyi", "rocket"}
    vocab = manifest.get("clip-bpe-vocab")
    assert vocab.sha256 == "924691ac288e54409236115652ad4aa250f48203de50a9e4722a6ecd48d6804a"


def test_verify_with_nothing_downloaded_is_a_failure(board, manifest):
    line = one_line_error(board.npuctl("models", "verify"), 4)
    assert "no model is downloaded" in line
    result = board.npuctl("models", "verify", "--json")
    assert result.returncode == 4
    error = json.loads(result.stdout.strip().splitlines()[-1])  # after the report
    assert error == {
        "schema": "npuctl-error/1",
        "error": "no model is downloaded, nothing was verified: run 'npuctl models fetch'",
        "exit_code": 4,
    }
