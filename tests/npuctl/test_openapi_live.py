"""The OpenAPI document npuctl serve publishes, against the server itself: schemathesis (PyPI)
generates requests from the document (valid ones and ones it forbids) and checks every
answer: no server error, every status and header documented, every body in its documented
schema, forbidden requests refused. Bounded in time; a fixed seed makes a failure repeat.
What the document cannot describe (an image's bytes, a text's length in tokens) is listed in
schemathesis.toml beside this file."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from testkit.serve_process import Server, start
from testkit.yolo_outputs import synthetic_output

from .conftest import Board
from .test_serve_vision import KEY

CONFIG = Path(__file__).with_name("schemathesis.toml")


@pytest.fixture
def every_model(clip_board: Board, tmp_path: Path) -> Board:
    raw = tmp_path / "yolo-output.bin"
    raw.write_bytes(synthetic_output([(0, 0.9, 200, 330, 120, 400)]).tobytes())
    clip_board.model("yolov8n.cix", ["U8 1228800 255.0 0"], [f"F16 1411200 1.0 0 {raw}"])
    return clip_board


def schemathesis(server: Server, seconds: int, tmp_path: Path) -> subprocess.CompletedProcess:
    # the test environment's own, whether or not its bin folder is on PATH
    program = shutil.which("schemathesis", path=str(Path(sys.executable).parent))
    if program is None:
        pytest.skip("schemathesis is not in this environment (make deps puts it in .venv)")
    return subprocess.run(
        [
            program,
            "--no-color",
            "--config-file",
            str(CONFIG),
            "run",
            f"{server.url}/openapi.json",
            "--checks",
            "all",
            "--max-time",
            str(seconds),
            "--seed",
            "20261125",
            "--workers",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=seconds + 120,
        check=False,
        cwd=tmp_path,  # its report folder lands here
    )


def test_the_document_matches_the_server(every_model: Board, tmp_path: Path) -> None:
    server = start(every_model.env)
    try:
        result = schemathesis(server, 15, tmp_path)
        assert server.request("GET", "/health").status == 200
    finally:
        assert server.stop() == 0
    assert result.returncode == 0, result.stdout[-6000:]
    assert " passed" in result.stdout and "failures" not in result.stdout.split("SUMMARY")[-1]
    assert "Traceback" not in server.stderr, server.stderr[-4000:]


def test_the_document_matches_a_server_with_a_key(every_model: Board, tmp_path: Path) -> None:
    """No credentials sent: every route but the public ones answers its documented 401."""
    key_file = tmp_path / "key"
    key_file.write_text(KEY)
    server = start(every_model.env, "--api-key-file", str(key_file))
    try:
        result = schemathesis(server, 8, tmp_path)
    finally:
        assert server.stop() == 0
    assert result.returncode == 0, result.stdout[-6000:]
    assert "Traceback" not in server.stderr, server.stderr[-4000:]
