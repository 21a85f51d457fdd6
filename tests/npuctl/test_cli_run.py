"""npuctl run / bench end to end through the CLI, against the libnoe test double."""

import json
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from testkit.yolo_outputs import synthetic_output

from .conftest import interruptible


def one_line_error(result, code):
    assert result.returncode == code, (result.returncode, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


def test_help_and_version(board):
    assert "run" in board.npuctl("--help").stdout
    assert board.npuctl("--version").stdout.startswith("npuctl, version ")


def test_clip_text_embeddings_and_similarity(board, vocab_in):
    board.clip_text()
    result = board.npuctl_json(
        "run", "clip-text", "a photo of a cat", "a photo of a cat", "an orange pi board"
    )
    vectors = [np.array(e["embedding"]) for e in result["embeddings"]]
    assert all(len(v) == 512 for v in vectors)
    assert all(np.linalg.norm(v) == pytest.approx(1.0, abs=1e-4) for v in vectors)
    scores = np.array(result["similarity"])
    assert scores[0, 1] == pytest.approx(1.0, abs=1e-5)  # same text, same embedding
    assert scores[0, 2] < 0.99  # different text, different embedding
    calls = board.calls()
    assert calls.count("deinit") == calls.count("init") >= 1


def test_clip_text_human_output(board, vocab_in):
    board.clip_text()
    result = board.npuctl("run", "clip-text", "hello", "world")
    assert result.returncode == 0, result.stderr
    assert "cosine similarity" in result.stdout and "512" in result.stdout


def test_empty_and_overlong_text(board, vocab_in):
    board.clip_text()
    assert "empty" in one_line_error(board.npuctl("run", "clip-text", "  "), 3)
    long_text = "word " * 2000
    assert "--truncate" in one_line_error(board.npuctl("run", "clip-text", long_text), 3)
    result = board.npuctl("run", "clip-text", "--truncate", long_text, "--json")
    assert result.returncode == 0, result.stderr


def test_missing_model(board, vocab_in):
    line = one_line_error(board.npuctl("run", "clip-text", "hi"), 4)
    assert "npuctl models fetch clip-text" in line


def test_lfs_pointer_model(board, vocab_in):
    (board.models / "clip_txt.cix").write_text(
        "version https://git-lfs.github.com/spec/v1\noid sha256:abc\nsize 74000000\n"
    )
    assert "Git LFS pointer" in one_line_error(board.npuctl("run", "clip-text", "hi"), 4)


def test_malformed_model_crashing_the_library(board, vocab_in, tmp_path):
    broken = tmp_path / "broken.cix"
    broken.write_bytes(b"\x7fELF not really a graph")
    line = one_line_error(board.npuctl("run", "clip-text", "--model", str(broken), "hi"), 4)
    assert "crashed libnoe (SIGSEGV)" in line


def test_model_with_wrong_tensor_sizes(board, vocab_in, tmp_path):
    wrong = board.model("wrong.cix", ["S32 400 1.0 0"], ["S8 512 1.0 0"])
    line = one_line_error(board.npuctl("run", "clip-text", "--model", str(wrong), "hi"), 4)
    assert "right model" in line


def test_no_device(board, vocab_in, tmp_path):
    board.clip_text()
    result = board.npuctl(
        "run", "clip-text", "hi", extra_env={"NOE_DOUBLE_DEVICE": str(tmp_path / "nothing")}
    )
    assert "OPEN_DEV_FAIL" in one_line_error(result, 5)


def test_missing_library(board, vocab_in, tmp_path):
    board.clip_text()
    result = board.npuctl("--library", str(tmp_path / "libnoe.so"), "run", "clip-text", "hi")
    assert "cix-noe-umd" in one_line_error(result, 5)


def test_second_inference_timing_out(board, vocab_in):
    board.clip_text()
    result = board.npuctl(
        "run", "clip-text", "one", "two", extra_env={"NOE_DOUBLE_FAIL": "infer@2=0x23"}
    )
    assert "TIMEOUT" in one_line_error(result, 5)
    assert board.calls().count("deinit") == board.calls().count("init")
    assert board.calls().count("clean_job") == 2  # the failed job was cleaned too


def test_unknown_model_name(board):
    assert "unknown model" in one_line_error(board.npuctl("bench", "resnet"), 2)


def test_clip_image_with_text(board, vocab_in, bus_jpg):
    board.clip_visual()
    board.clip_text()
    result = board.npuctl_json(
        "run", "clip-image", str(bus_jpg), str(bus_jpg), "--text", "a bus", "--text", "a cat"
    )
    assert len(result["embeddings"]) == 2
    assert len(result["embeddings"][0]["embedding"]) == 512
    assert np.array(result["similarity"])[0, 1] == pytest.approx(1.0, abs=1e-5)
    assert np.array(result["text_similarity"]["scores"]).shape == (2, 2)


def test_clip_image_rejects_a_non_image(board, tmp_path):
    board.clip_visual()
    text = tmp_path / "notes.jpg"
    text.write_text("not a picture")
    assert "not an image" in one_line_error(board.npuctl("run", "clip-image", str(text)), 3)


def test_yolo_detects_and_annotates(board, bus_jpg, tmp_path):
    raw = tmp_path / "yolo-output.bin"
    # a person filling the left of the letterboxed bus picture
    raw.write_bytes(synthetic_output([(0, 0.9, 200, 330, 120, 400)]).tobytes())
    board.model("yolov8n.cix", ["U8 1228800 255.0 0"], [f"F16 1411200 1.0 0 {raw}"])
    annotated = tmp_path / "out" / "bus-boxes.png"
    result = board.npuctl_json("run", "yolo", str(bus_jpg), "--annotate", str(annotated))
    assert [d["label"] for d in result["detections"]] == ["person"]
    x1, y1, x2, y2 = result["detections"][0]["box"]
    assert 0 <= x1 < x2 <= 810 and 0 <= y1 < y2 <= 1080
    assert annotated.exists() and annotated.read_bytes()[:4] == b"\x89PNG"
    assert list(annotated.parent.iterdir()) == [annotated]  # no temporary file left


def test_bench_reports_both_stages(board):
    board.clip_text()
    result = board.npuctl_json("bench", "clip-text", "-n", "5", "--warmup", "1")
    for stage in ("raw_inference", "full_pipeline"):
        stats = result[stage]
        assert set(stats) == {
            "mean_ms",
            "p50_ms",
            "p95_ms",
            "min_ms",
            "max_ms",
            "stddev_ms",
            "throughput_per_s",
        }
        assert stats["min_ms"] <= stats["p50_ms"] <= stats["max_ms"]
    assert result["full_pipeline"]["mean_ms"] >= result["raw_inference"]["mean_ms"]


def test_ctrl_c_during_a_run_closes_the_context(board):
    board.clip_text()
    process = subprocess.Popen(
        [sys.executable, "-m", "npuctl", "bench", "clip-text", "-n", "100000000"],
        env=board.env,
        preexec_fn=interruptible,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # Wait until inferences are really running (the double records each call).
    while board.calls().count("infer") < 5:
        assert process.poll() is None, process.stderr.read()
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130
    assert stderr.strip() == "npuctl: interrupted"
    calls = board.calls()
    assert calls.count("deinit") == calls.count("init") and calls[-1] == "deinit"


def test_json_is_valid_for_models_list(board):
    document = json.loads(board.npuctl("models", "list", "--json").stdout)
    assert {e["name"] for e in document["entries"]} >= {"clip-text", "clip-visual", "yolov8n"}
    assert Path(document["models_dir"]).samefile(board.models)


def test_json_errors_are_json_on_stdout(board, vocab_in):
    result = board.npuctl("run", "clip-text", "hi", "--json")
    assert result.returncode == 4
    document = json.loads(result.stdout)
    assert document["schema"] == "npuctl-error/1" and document["exit_code"] == 4
    assert "npuctl models fetch" in document["error"]
    assert result.stderr.startswith("npuctl: error: ")
