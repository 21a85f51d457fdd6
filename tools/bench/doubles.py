"""The NPUs the benchmarks serve with: the libnoe double and the Teflon double, each taking
the model's NPU time as the board would (YOLOv8n 15 ms, CLIP 14 ms, SSDLite MobileDet 48 ms,
MobileNet 11 ms), with model files they understand in a scratch folder."""

from __future__ import annotations

import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from bench.host_cost import ROOT, build_double, compile_double, test_data
from testkit.testdata import BUS_JPG_SHA256, CLIP_ANYTORCH, CLIP_VOCAB_SHA256, YOLOV5
from testkit.tflite_models import pooled_classifier, ssd_detector
from testkit.yolo_outputs import synthetic_output


@dataclass(frozen=True)
class Doubles:
    zhouyi: dict[str, str]  # the environment of npuctl serve on the libnoe double
    rocket: dict[str, str]  # ... on the Teflon double (three cores)
    bus: Path  # the test photo


def build_teflon_double(directory: Path) -> Path:
    source = ROOT / "tests" / "npuctl" / "teflon_double" / "libteflon_double.c"
    return compile_double(source, directory / "libteflon.so")


def _zhouyi_models(folder: Path, scratch: Path) -> None:
    vocab = test_data(CLIP_ANYTORCH, "clip/bpe_simple_vocab_16e6.txt.gz", CLIP_VOCAB_SHA256)
    folder.mkdir()
    canned = scratch / "yolo.bin"
    canned.write_bytes(
        synthetic_output([(0, 0.9, 200, 330, 120, 400), (5, 0.8, 400, 300, 300, 200)]).tobytes()
    )
    (folder / "yolov8n.cix").write_text(
        f"NOEDOUBLE 1\ninput U8 1228800 255.0 0\noutput F16 1411200 1.0 0 {canned}\n"
    )
    (folder / "clip_txt.cix").write_text(
        "NOEDOUBLE 1\ninput S32 308 1.0 0\noutput S8 512 27.67 60\n"
    )
    (folder / "clip_visual.cix").write_text(
        "NOEDOUBLE 1\ninput U8 150528 64.75 12\noutput S8 512 29.52 -80\n"
    )
    shutil.copyfile(vocab, folder / vocab.name)


def _rocket_models(folder: Path) -> None:
    folder.mkdir()
    ssd_detector(folder / "ssdlite_mobiledet_coco_qat_postprocess.tflite", size=320)
    pooled_classifier(folder / "mobilenet_v1_1.0_224_quant.tflite")
    labels = "\n".join(f"label {n}" for n in range(1001)) + "\n"
    (folder / "labels_mobilenet_quant_v1_224.txt").write_text(labels)


def doubles(scratch: Path) -> Doubles:
    """Both doubles, their models and a device node for them, in ``scratch``."""
    device = scratch / "device"
    device.write_bytes(b"")
    base = {"PATH": "/usr/bin:/bin"}
    _zhouyi_models(scratch / "zhouyi", scratch)
    _rocket_models(scratch / "rocket")
    zhouyi = {
        **base,
        "NPUCTL_LIBNOE": str(build_double(scratch)),
        "NPUCTL_MODELS": str(scratch / "zhouyi"),
        "NOE_DOUBLE_DEVICE": str(device),
        "NOE_DOUBLE_INFER_MS": "15",
        "NPUCTL_PLATFORM": "zhouyi",
    }
    rocket = {
        **base,
        "NPUCTL_TEFLON": str(build_teflon_double(scratch)),
        "NPUCTL_MODELS": str(scratch / "rocket"),
        "TEFLON_DOUBLE_DEVICE": str(device),
        "TEFLON_DOUBLE_CORES": "3",
        "NPUCTL_PLATFORM": "rocket",
        "PYTHONPATH": ":".join(sys.path),
    }
    bus = test_data(YOLOV5, "yolov5/data/images/bus.jpg", BUS_JPG_SHA256)
    return Doubles(zhouyi, rocket, bus)
