"""npuctl run mobilenet and bench on the rocket platform, as a user runs them: the CLI as a
subprocess, models built at test time, the Teflon double as the delegate (it hands every
operation back to the CPU, so NPU and CPU answers must be identical)."""

import json

import numpy as np
import pytest
from PIL import Image

from .test_cli_run import one_line_error


@pytest.fixture
def picture(tmp_path):
    rng = np.random.default_rng(3)
    path = tmp_path / "picture.png"
    Image.fromarray(rng.integers(0, 256, (40, 30, 3), dtype=np.uint8)).save(path)
    return path


def run_json(rocket, *args):
    result = rocket.npuctl("run", "mobilenet", *args, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_classifies_on_the_npu_and_on_the_cpu_alike(rocket, tflite_classifier, picture):
    model = tflite_classifier()
    npu = run_json(rocket, "--model", str(model), str(picture))
    cpu = run_json(rocket, "--model", str(model), "--cpu", str(picture))
    assert npu["device"] == "npu" and cpu["device"] == "cpu"
    (image,) = npu["images"]
    assert len(image["top"]) == 5
    assert [t["index"] for t in image["top"]] == [t["index"] for t in cpu["images"][0]["top"]]
    scores = [t["score"] for t in image["top"]]
    assert scores == sorted(scores, reverse=True)
    assert image["top"][0]["label"] == f"class {image['top'][0]['index']}"


def test_human_output_names_the_labels(rocket, tflite_classifier, picture, tmp_path):
    labels = tmp_path / "labels.txt"
    labels.write_text("".join(f"thing {n}\n" for n in range(10)))
    result = rocket.npuctl(
        "run",
        "mobilenet",
        "--model",
        str(tflite_classifier()),
        "--labels",
        str(labels),
        "-k",
        "3",
        str(picture),
    )
    assert result.returncode == 0, result.stderr
    assert "NPU" in result.stdout
    assert sum(1 for line in result.stdout.splitlines() if "thing " in line) == 3


def test_labels_that_do_not_fit_the_model(rocket, tflite_classifier, picture, tmp_path):
    labels = tmp_path / "labels.txt"
    labels.write_text("one\ntwo\n")
    result = rocket.npuctl(
        "run",
        "mobilenet",
        "--model",
        str(tflite_classifier()),
        "--labels",
        str(labels),
        str(picture),
    )
    assert "2 labels, the model has 10 classes" in one_line_error(result, 3)


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"quantized": False}, "float32 model: the NPU runs quantized models only"),
        ({"image_input": False}, "its input is 1x192, not an image"),
    ],
)
def test_models_the_npu_cannot_classify_with(rocket, tflite_classifier, picture, options, expected):
    model = tflite_classifier(f"bad-{len(options)}-{next(iter(options))}.tflite", **options)
    result = rocket.npuctl("run", "mobilenet", "--model", str(model), str(picture))
    assert expected in one_line_error(result, 4)


def test_a_file_that_is_not_a_model(rocket, tflite_classifier, picture, tmp_path):
    bogus = tmp_path / "bogus.tflite"
    bogus.write_bytes(b"this is no flatbuffer at all" * 10)
    result = rocket.npuctl("run", "mobilenet", "--model", str(bogus), str(picture))
    assert "is not a TensorFlow Lite model" in one_line_error(result, 4)


def test_a_truncated_model(rocket, tflite_classifier, picture, tmp_path):
    truncated = tmp_path / "truncated.tflite"
    truncated.write_bytes(tflite_classifier().read_bytes()[:200])
    result = rocket.npuctl("run", "mobilenet", "--model", str(truncated), str(picture))
    assert "does not load" in one_line_error(result, 4)


def test_an_image_that_is_not_an_image(rocket, tflite_classifier, tmp_path):
    text = tmp_path / "notes.jpg"
    text.write_text("not a picture")
    result = rocket.npuctl("run", "mobilenet", "--model", str(tflite_classifier()), str(text))
    assert "not an image" in one_line_error(result, 3)


def test_a_delegate_that_is_not_teflon(rocket, tflite_classifier, picture, libnoe_double):
    result = rocket.npuctl(
        "--delegate",
        str(libnoe_double),
        "run",
        "mobilenet",
        "--model",
        str(tflite_classifier()),
        str(picture),
    )
    assert "is not Mesa's Teflon delegate" in one_line_error(result, 5)


def test_teflon_without_the_device(rocket, tflite_classifier, picture, tmp_path):
    result = rocket.npuctl(
        "run",
        "mobilenet",
        "--model",
        str(tflite_classifier()),
        str(picture),
        extra_env={"TEFLON_DOUBLE_DEVICE": str(tmp_path / "absent")},
    )
    line = one_line_error(result, 5)
    assert "Couldn't open kernel device" in line and "npuctl doctor" in line


def test_the_managed_model_is_missing(rocket, picture):
    result = rocket.npuctl("run", "mobilenet", str(picture))
    assert "npuctl models fetch" in one_line_error(result, 4)


def test_bench_puts_npu_and_cpu_side_by_side(rocket, tflite_classifier):
    result = rocket.npuctl(
        "bench", "mobilenet", "--model", str(tflite_classifier()), "-n", "5", "--json"
    )
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["platform"] == "rocket"
    for stage in ("npu", "cpu"):
        assert document[stage]["p95_ms"] >= document[stage]["p50_ms"] > 0
    assert document["ratio"]["stages"] == ["npu", "cpu"]
    assert document["ratio"]["mean_ratio"] > 0
    human = rocket.npuctl("bench", "mobilenet", "--model", str(tflite_classifier()), "-n", "3")
    assert human.returncode == 0, human.stderr
    assert "cpu / npu:" in human.stdout
