"""Fixtures for npuctl: the libnoe test double built with the system compiler, a fake
/dev/aipu, model files the double understands, and running the CLI as a user would."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from testkit.testdata import (
    BUS_JPG_SHA256,
    CLIP_ANYTORCH,
    CLIP_VOCAB_SHA256,
    YOLOV5,
    wheel_member,
)


def interruptible() -> None:
    """For preexec_fn: SIGINT as a terminal delivers it. A test run started in the background
    inherits SIGINT ignored, and Python then never raises KeyboardInterrupt."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


DOUBLE_SOURCE = Path(__file__).resolve().parents[1] / "noe_double" / "libnoe_double.c"


def shared_library(
    source: Path, target: Path, compiler: str | None = None, defines: tuple[str, ...] = ()
) -> Path:
    """A test double or shim (C) built with warnings as errors; a skip without a compiler."""
    compiler = compiler or shutil.which("cc") or shutil.which("gcc")
    if compiler is None or shutil.which(compiler) is None:
        pytest.skip(f"no C compiler ({compiler or 'cc'}) to build {source.name}: run 'make deps'")
    subprocess.run(
        [
            compiler,
            "-Wall",
            "-Wextra",
            "-Werror",
            "-O2",
            "-shared",
            "-fPIC",
            *(f"-D{define}" for define in defines),
            "-o",
            str(target),
            str(source),
            "-ldl",
        ],
        check=True,
    )
    return target


@pytest.fixture(scope="session")
def libnoe_double(tmp_path_factory) -> Path:
    return shared_library(DOUBLE_SOURCE, tmp_path_factory.mktemp("double") / "libnoe.so")


def _libaipudrv(directory: Path, version: str, defines: tuple[str, ...]) -> Path:
    """The double as a libaipudrv of ``version``, installed as libaipudrv6 installs it."""
    shared_library(DOUBLE_SOURCE, directory / f"libaipudrv.so.{version}", defines=defines)
    (directory / "libaipudrv.so.6").symlink_to(f"libaipudrv.so.{version}")
    return directory / "libaipudrv.so.6"


@pytest.fixture(scope="session")
def libaipudrv_double(tmp_path_factory) -> Path:
    """The double as Arm China's libaipudrv 6.1.0."""
    return _libaipudrv(tmp_path_factory.mktemp("libaipudrv"), "6.1.0", ("DOUBLE_LIBAIPUDRV",))


@pytest.fixture(scope="session")
def libaipudrv_6_0_double(tmp_path_factory) -> Path:
    """The double as libaipudrv 6.0.0 (Compass 4.1.0): GET_VERSION 272, 273 ABORT_CMDPOOL."""
    return _libaipudrv(
        tmp_path_factory.mktemp("libaipudrv-6.0"),
        "6.0.0",
        ("DOUBLE_LIBAIPUDRV", "DOUBLE_LIBAIPUDRV_6_0"),
    )


@pytest.fixture(scope="session")
def clip_vocab() -> Path:
    return wheel_member(CLIP_ANYTORCH, "clip/bpe_simple_vocab_16e6.txt.gz", CLIP_VOCAB_SHA256)


@pytest.fixture(scope="session")
def reference_tokenizer_source() -> Path:
    return wheel_member(CLIP_ANYTORCH, "clip/simple_tokenizer.py")


@pytest.fixture(scope="session")
def bus_jpg() -> Path:
    return wheel_member(YOLOV5, "yolov5/data/images/bus.jpg", BUS_JPG_SHA256)


def write_model(path: Path, inputs: list[str], outputs: list[str]) -> Path:
    """A model file for the double: each tensor as 'TYPE BYTES SCALE ZERO_POINT [FILE]'."""
    lines = (
        ["NOEDOUBLE 1"]
        + [f"input {spec}" for spec in inputs]
        + [f"output {spec}" for spec in outputs]
    )
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@dataclass
class Board:
    """A machine with the NPU as npuctl sees it: the double, a device node, a model dir."""

    library: Path
    device: Path
    models: Path
    trace: Path
    env: dict[str, str]

    def model(self, name: str, inputs: list[str], outputs: list[str]) -> Path:
        return write_model(self.models / name, inputs, outputs)

    def clip_text(self) -> Path:
        return self.model("clip_txt.cix", ["S32 308 1.0 0"], ["S8 512 27.67 60"])

    def clip_visual(self) -> Path:
        return self.model("clip_visual.cix", ["U8 150528 64.75 12"], ["S8 512 29.52 -80"])

    def calls(self) -> list[str]:
        if not self.trace.exists():
            return []
        return self.trace.read_text(encoding="utf-8").split()

    def npuctl(
        self, *args: str, extra_env: dict[str, str] | None = None, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "npuctl", *args],
            capture_output=True,
            text=True,
            env={**self.env, **(extra_env or {})},
            timeout=timeout,
            check=False,
        )

    def npuctl_json(self, *args: str, **kwargs) -> dict:
        result = self.npuctl(*args, "--json", **kwargs)
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)


@pytest.fixture
def board(tmp_path: Path, libnoe_double: Path) -> Board:
    device = tmp_path / "dev-aipu"
    device.write_bytes(b"")
    models = tmp_path / "models"
    models.mkdir()
    trace = tmp_path / "calls.log"
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("NOE_DOUBLE_", "NPUCTL_"))
    }
    env.update(
        {
            "NPUCTL_LIBNOE": str(libnoe_double),
            "NPUCTL_MODELS": str(models),
            "NOE_DOUBLE_DEVICE": str(device),
            "NOE_DOUBLE_TRACE": str(trace),
        }
    )
    return Board(libnoe_double, device, models, trace, env)


# What the YOLOv8n double answers every frame with (class, score, box centre and size).
YOLO_DETECTIONS = [(0, 0.9, 200, 330, 120, 400), (5, 0.8, 400, 300, 300, 200)]


@pytest.fixture
def yolo(board: Board, tmp_path: Path) -> Board:
    """The board with YOLOv8n (yolov8n.cix), answering YOLO_DETECTIONS to every frame."""
    from testkit.yolo_outputs import synthetic_output

    raw = tmp_path / "yolo-output.bin"
    raw.write_bytes(synthetic_output(YOLO_DETECTIONS).tobytes())
    board.model("yolov8n.cix", ["U8 1228800 255.0 0"], [f"F16 1411200 1.0 0 {raw}"])
    return board


@pytest.fixture
def vocab_in(board: Board, clip_vocab: Path) -> Path:
    target = board.models / clip_vocab.name
    shutil.copyfile(clip_vocab, target)
    return target


TEFLON_DOUBLE_SOURCE = Path(__file__).resolve().parent / "teflon_double" / "libteflon_double.c"


@pytest.fixture(scope="session")
def teflon_double(tmp_path_factory) -> Path:
    return shared_library(TEFLON_DOUBLE_SOURCE, tmp_path_factory.mktemp("teflon") / "libteflon.so")


@pytest.fixture(scope="session")
def tflite_classifier(tmp_path_factory):
    """build(name, **options) -> a .tflite classifier built at test time (tflite_models)."""
    pytest.importorskip("tflite", reason="PyPI's tflite builds the test models: run 'make deps'")
    pytest.importorskip("ai_edge_litert", reason="npuctl[rocket] is not installed: make deps")
    from testkit.tflite_models import classifier

    directory = tmp_path_factory.mktemp("tflite")

    def build(name: str = "classifier.tflite", **options) -> Path:
        return classifier(directory / name, **options)

    return build


@dataclass
class RocketBoard:
    """The rocket side as npuctl sees it: the Teflon double and the device it opens."""

    delegate: Path
    device: Path
    models: Path
    env: dict[str, str]

    def npuctl(self, *args: str, extra_env: dict[str, str] | None = None):
        return subprocess.run(
            [sys.executable, "-m", "npuctl", *args],
            capture_output=True,
            text=True,
            env={**self.env, **(extra_env or {})},
            timeout=300,
            check=False,
        )


@pytest.fixture
def rocket(tmp_path: Path, teflon_double: Path) -> RocketBoard:
    device = tmp_path / "accel0"
    device.write_bytes(b"")
    models = tmp_path / "models"
    models.mkdir()
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("TEFLON_DOUBLE_", "NPUCTL_"))
    }
    env.update(
        {
            "NPUCTL_TEFLON": str(teflon_double),
            "NPUCTL_MODELS": str(models),
            "TEFLON_DOUBLE_DEVICE": str(device),
        }
    )
    return RocketBoard(teflon_double, device, models, env)


@pytest.fixture
def clip_board(board: Board, vocab_in: Path) -> Board:
    """A board with both CLIP models, for npuctl serve."""
    board.clip_text()
    board.clip_visual()
    return board


@pytest.fixture
def rocket_models(rocket, tflite_classifier, tmp_path_factory):
    pytest.importorskip("tflite", reason="PyPI's tflite builds the test models: run 'make deps'")
    from testkit.tflite_models import ssd_detector

    ssd_detector(rocket.models / "ssdlite_mobiledet_coco_qat_postprocess.tflite")
    for name, seed in (
        ("mobilenet_v1_1.0_224_quant.tflite", 7),
        ("mobilenet_v2_1.0_224_quant.tflite", 8),
    ):
        shutil.copyfile(tflite_classifier(name, classes=1001, seed=seed), rocket.models / name)
    labels = [f"label {n}" for n in range(1001)]
    (rocket.models / "labels_mobilenet_quant_v1_224.txt").write_text("\n".join(labels) + "\n")
    return rocket
