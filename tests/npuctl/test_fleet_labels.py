"""The doctor for fleets: Node Feature Discovery's feature file (labels that expire, written
atomically) and node-problem-detector's plugin protocol, on board images with the libnoe
double; and the provision action that refreshes the labels with a systemd timer."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

from .board_image import USER
from .conftest import Board
from .test_doctor import image, models  # noqa: F401 - fixtures

FEATURE = re.compile(r"^# \+expiry-time=(\S+)$")


def run_doctor(board: Board, image, *args: str):  # noqa: F811 - the fixture's value
    return board.npuctl(
        "doctor",
        *args,
        extra_env={
            "NPUCTL_ROOT": str(image.root),
            "NPUCTL_IDENTITY": USER,
            "NOE_DOUBLE_DEVICE": str(image.root / "dev/aipu"),
        },
    )


def feature_labels(path: Path) -> tuple[datetime, dict[str, str]]:
    lines = path.read_text().splitlines()
    expiry = FEATURE.match(lines[0])
    assert expiry, lines[0]
    when = datetime.fromisoformat(expiry.group(1).replace("Z", "+00:00"))
    labels = dict(line.split("=", 1) for line in lines if not line.startswith("#"))
    return when, labels


def test_a_healthy_node_is_labelled(board: Board, image, models, tmp_path: Path):  # noqa: F811
    features = tmp_path / "features.d" / "npuctl"
    result = run_doctor(board, image, "--nfd", str(features), "--nfd-expiry", "15")
    assert result.returncode == 0, result.stdout
    when, labels = feature_labels(features)
    minutes = (when - datetime.now(UTC)).total_seconds() / 60
    assert 13 < minutes <= 15
    assert labels == {
        "npuctl.io/npu-family": "zhouyi",
        "npuctl.io/npu-healthy": "true",
        "npuctl.io/driver-held": "false",
        "npuctl.io/driver-version": "5.11.0",
        "npuctl.io/library-version": "0.6.0",
        "npuctl.io/model.clip-text": "true",
        "npuctl.io/model.clip-visual": "true",
        "npuctl.io/model.yolov8n": "true",
    }
    assert [p.name for p in features.parent.iterdir()] == ["npuctl"]  # no temporary left
    assert oct(features.stat().st_mode)[-3:] == "644"


def test_a_broken_npu_flips_the_label_and_the_problem_detector(
    board: Board,
    image,  # noqa: F811
    models,  # noqa: F811
    tmp_path: Path,
):
    healthy = run_doctor(board, image, "--npd")
    assert (healthy.returncode, healthy.stdout.strip()) == (0, "NPU healthy (zhouyi)")
    image.remove("dev/aipu")
    features = tmp_path / "npuctl"
    run_doctor(board, image, "--nfd", str(features))
    _, labels = feature_labels(features)
    assert labels["npuctl.io/npu-healthy"] == "false"
    broken = run_doctor(board, image, "--npd")
    assert broken.returncode == 1
    assert broken.stdout.startswith("NPU unhealthy: /dev/aipu does not exist")
    assert len(broken.stdout.splitlines()) == 1


def test_no_npu_is_unknown_to_the_problem_detector(board: Board, tmp_path: Path):
    result = board.npuctl("doctor", "--npd", extra_env={"NPUCTL_ROOT": str(tmp_path)})
    assert (result.returncode, result.stdout.strip()) == (2, "no supported NPU on this node")


def test_an_unwritable_feature_file_is_one_line(board: Board, tmp_path: Path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = board.npuctl(
        "doctor", "--nfd", str(blocker / "npuctl"), extra_env={"NPUCTL_ROOT": str(tmp_path)}
    )
    assert result.returncode == 3
    assert "cannot write" in result.stderr and "Traceback" not in result.stderr


def test_provision_installs_the_label_timer(board: Board, image):  # noqa: F811
    env = {"NPUCTL_ROOT": str(image.root)}
    dry = board.npuctl("provision", "--only", "nfd", "--dry-run", extra_env=env)
    assert "OnUnitActiveSec=5min" in dry.stdout and "--nfd-expiry 15" in dry.stdout
    done = board.npuctl("provision", "--only", "nfd", extra_env=env)
    assert done.returncode == 0, done.stderr
    timer = image.root / "etc/systemd/system/npuctl-nfd.timer"
    assert "OnUnitActiveSec=5min" in timer.read_text()
    again = board.npuctl("provision", "--only", "nfd", extra_env=env)
    assert "[already] nfd" in again.stdout
    undone = board.npuctl("provision", "--only", "nfd", "--undo", extra_env=env)
    assert undone.returncode == 0 and not timer.exists()
