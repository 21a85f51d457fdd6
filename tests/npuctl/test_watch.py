"""npuctl watch as users run it: the CLI as a subprocess, the libnoe double as the NPU (in
process or through npuctl serve), the local store across restarts, Qdrant through the
official client's local mode, a webhook over a real socket, and bad templates."""

from __future__ import annotations

import json
import sqlite3
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from npuctl.watch.sensors import Sample, temperatures
from npuctl.watch.text import Renderer
from testkit.serve_process import start

from .conftest import Board


@pytest.fixture
def clip_board(board: Board, vocab_in: Path) -> Board:
    board.clip_text()
    return board


def watch(board: Board, state: Path, *args: str):
    return board.npuctl(
        "watch", "--interval", "0", "--state-dir", str(state), "--json", *args, timeout=300
    )


def lines(result) -> list[dict]:
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


def stored(state: Path) -> list[tuple]:
    with sqlite3.connect(state / "watch.sqlite3") as db:
        return db.execute("SELECT id, score, delivered FROM samples ORDER BY id").fetchall()


def test_every_temperature_sensor_is_read(tmp_path: Path) -> None:
    zone = tmp_path / "sys/class/thermal/thermal_zone0"
    zone.mkdir(parents=True)
    (zone / "type").write_text("soc-thermal\n")
    (zone / "temp").write_text("52300\n")
    nvme = tmp_path / "sys/class/hwmon/hwmon0"
    nvme.mkdir(parents=True)
    (nvme / "name").write_text("nvme\n")
    (nvme / "temp1_input").write_text("38850\n")
    (nvme / "temp1_label").write_text("Composite\n")
    (nvme / "temp2_input").write_text("not a number\n")
    # psutil would report only the NVMe sensor here: a hwmon sensor hides the thermal zones.
    assert temperatures(tmp_path) == {"soc-thermal": 52.3, "nvme Composite": 38.9}


def test_the_default_text_says_levels_in_words() -> None:
    sample = Sample("board", 0.0, 96.0, 30.0, (3.9, 2.0, 1.0), {"soc": 91.0}, {"/": 50.0})
    text = Renderer(None, cores=4).render(sample)
    assert "cpu 96.0% critical" in text
    assert "memory 30.0% low" in text
    assert "soc 91.0°C critical" in text
    assert "disk / 50.0% full moderate" in text


def test_samples_are_embedded_scored_and_kept_across_restarts(
    clip_board: Board, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    first = lines(watch(clip_board, state, "--count", "8", "--warmup", "5"))
    assert [record["warming_up"] for record in first] == [True] * 5 + [False] * 3
    assert all(isinstance(record["score"], float) for record in first[5:])
    assert first[0]["schema"] == "npuctl-watch/1" and first[0]["text"].startswith("host ")
    again = watch(clip_board, state, "--count", "2", "--warmup", "5")
    assert not any(record["warming_up"] for record in lines(again))
    assert "baseline loaded" in again.stderr
    assert len(stored(state)) == 10
    fresh = lines(watch(clip_board, state, "--count", "1", "--warmup", "5", "--rebaseline"))
    assert fresh[0]["warming_up"]


def test_the_store_is_bounded(clip_board: Board, tmp_path: Path) -> None:
    state = tmp_path / "state"
    lines(watch(clip_board, state, "--count", "25", "--warmup", "5", "--keep", "10"))
    rows = stored(state)
    assert len(rows) == 10
    assert rows[-1][0] == 25


def test_embeds_through_a_running_server(clip_board: Board, tmp_path: Path) -> None:
    server = start(clip_board.env)
    try:
        result = watch(clip_board, tmp_path / "s", "--count", "3", "--server", server.url)
        assert len(lines(result)) == 3
        assert f"embedding with {server.url}" in result.stderr
        assert server.metric('npuctl_serve_inputs_total{modality="text"}') == 3
    finally:
        assert server.stop() == 0


def test_anomalies_go_to_the_log_and_the_webhook(clip_board: Board, tmp_path: Path) -> None:
    received: list[dict] = []

    class Hook(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *_: object) -> None:
            pass

    hook = ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=hook.serve_forever, daemon=True).start()
    try:
        calm, odd = tmp_path / "calm.j2", tmp_path / "odd.j2"
        calm.write_text("all quiet on {{ host }}")
        odd.write_text("smoke and sirens on {{ host }}")
        state = tmp_path / "state"
        learned = lines(
            watch(clip_board, state, "--count", "6", "--warmup", "5", "--template", str(calm))
        )
        assert not any(record["anomaly"] for record in learned)
        url = f"http://127.0.0.1:{hook.server_address[1]}/alert"
        result = watch(clip_board, state, "--count", "2", "--template", str(odd), "--webhook", url)
        records = lines(result)
        assert all(record["anomaly"] and record["reason"] == "spike" for record in records)
        assert "anomaly (spike)" in result.stderr
        assert [record["text"] for record in received] == [r["text"] for r in records]
    finally:
        hook.shutdown()


@pytest.mark.parametrize(
    ("template", "message"),
    [
        ("{% for x in %}", "not a valid Jinja template"),
        ("{{ no_such_metric }}", "fails on a sample"),
        ("{{ cpu / 0 }}", "fails on a sample"),
        ("   ", "renders an empty text"),
    ],
)
def test_bad_templates_are_one_line(
    clip_board: Board, tmp_path: Path, template: str, message: str
) -> None:
    path = tmp_path / "t.j2"
    path.write_text(template)
    result = watch(clip_board, tmp_path / "s", "--count", "1", "--template", str(path))
    assert result.returncode == 3
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.stderr


def test_samples_go_to_qdrant(clip_board: Board, tmp_path: Path) -> None:
    pytest.importorskip("qdrant_client", reason="qdrant-client is a dev dependency")
    from qdrant_client import QdrantClient

    where = tmp_path / "qdrant"
    lines(watch(clip_board, tmp_path / "s", "--count", "4", "--qdrant", f"file://{where}"))
    client = QdrantClient(path=str(where))
    try:
        collection = client.get_collection("npuctl-watch")
        assert collection.config.params.vectors.size == 512
        assert collection.config.params.vectors.distance.value == "Cosine"
        points, _ = client.scroll("npuctl-watch", limit=10, with_payload=True)
        assert len(points) == 4
        assert {"host", "time", "text", "metrics", "score", "anomaly"} <= set(points[0].payload)
    finally:
        client.close()


def test_nothing_is_lost_while_qdrant_is_away(clip_board: Board, tmp_path: Path) -> None:
    pytest.importorskip("qdrant_client", reason="qdrant-client is a dev dependency")
    from qdrant_client import QdrantClient

    state = tmp_path / "s"
    away = watch(clip_board, state, "--count", "3", "--qdrant", "http://127.0.0.1:9")
    assert len(lines(away)) == 3
    assert away.stderr.count("keeping samples locally") == 1
    assert [row[2] for row in stored(state)] == [0, 0, 0]
    where = tmp_path / "qdrant"
    lines(watch(clip_board, state, "--count", "1", "--qdrant", f"file://{where}"))
    client = QdrantClient(path=str(where))
    try:
        assert client.count("npuctl-watch").count == 4
    finally:
        client.close()
    assert [row[2] for row in stored(state)] == [1, 1, 1, 1]
