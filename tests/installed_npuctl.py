"""Every npuctl command, run through an installed npuctl (a wheel in a virtual environment, the
.deb in a chroot): each answers --help, and each runs once for real on the test doubles. A
file missing from a package, or a dependency it does not declare, fails here.

A scratch folder holds what the commands are run on (the libnoe and Teflon doubles, models
the doubles understand, a picture, a CixBuilder config); ``Installed`` says how the npuctl
under test is called and where it sees that folder."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import textwrap
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import click
import numpy as np
from PIL import Image

from testkit.serve_process import start

from .npuctl.conftest import DOUBLE_SOURCE, TEFLON_DOUBLE_SOURCE, shared_library, write_model
from .npuctl.immich_client import immich_client

GOOD_CFG = """\
[Parser]
input_model = model.onnx
model_type = onnx
model_name = my-model
input_shape = [1, 77]
output = output_tensor_name
output_dir = ./out

[Optimizer]
dataset = numpymultiinputdataset
calibration_data = calib.npz
calibration_batch_size = 1
output_dir = ./out

[GBuilder]
target = X2_1204
outputs = ./out/model.cix
"""


def command_paths() -> list[tuple[str, ...]]:
    """Every command and subcommand of npuctl's command tree (from this source tree)."""
    from npuctl.cli import cli

    found: list[tuple[str, ...]] = []

    def walk(group: click.Group, path: tuple[str, ...]) -> None:
        context = click.Context(group)
        for name in group.list_commands(context):
            command = group.get_command(context, name)
            assert command is not None, name
            found.append((*path, name))
            if isinstance(command, click.Group):
                walk(command, (*path, name))

    walk(cli, ())
    return found


def prepare_scratch(
    scratch: Path, seen_as: str, bus_jpg: Path, clip_vocab: Path, classifier: Path | None
) -> None:
    """The files the real invocations use, all inside ``scratch`` (which the installed npuctl
    sees at ``seen_as``)."""
    from testkit.yolo_outputs import synthetic_output

    (scratch / "home").mkdir(parents=True)
    models = scratch / "models"
    models.mkdir()
    shared_library(DOUBLE_SOURCE, scratch / "libnoe.so")
    shared_library(TEFLON_DOUBLE_SOURCE, scratch / "libteflon.so")
    (scratch / "dev-aipu").write_bytes(b"")
    (scratch / "accel0").write_bytes(b"")
    write_model(models / "clip_txt.cix", ["S32 308 1.0 0"], ["S8 512 27.67 60"])
    write_model(models / "clip_visual.cix", ["U8 150528 64.75 12"], ["S8 512 29.52 -80"])
    raw = scratch / "yolo-output.bin"
    raw.write_bytes(synthetic_output([(0, 0.9, 200, 330, 120, 400)]).tobytes())
    # The double reads the output from this path, as the installed npuctl sees it.
    output = f"F16 1411200 1.0 0 {seen_as}/{raw.name}"
    write_model(models / "yolov8n.cix", ["U8 1228800 255.0 0"], [output])
    shutil.copyfile(clip_vocab, models / clip_vocab.name)
    shutil.copyfile(bus_jpg, scratch / "bus.jpg")
    picture = np.random.default_rng(3).integers(0, 256, (40, 30, 3), dtype=np.uint8)
    Image.fromarray(picture).save(scratch / "picture.png")
    if classifier is not None:  # PyPI's tflite is there to build models
        from testkit.tflite_models import ssd_detector

        shutil.copyfile(classifier, scratch / "classifier.tflite")
        ssd_detector(scratch / "ssd.tflite")
    (scratch / "model.onnx").write_bytes(b"")
    np.savez(scratch / "calib.npz", input0=np.zeros((4, 1, 77), np.int32))
    (scratch / "model.cfg").write_text(textwrap.dedent(GOOD_CFG))


@dataclass
class Installed:
    """An installed npuctl: the command that starts it and the folder it is run on, as the
    host sees it (``scratch``) and as npuctl sees it (``seen_as``)."""

    prefix: list[str]
    scratch: Path
    seen_as: str
    extra_env: dict[str, str]
    rocket_runtime: bool  # whether ai-edge-litert is installed beside it

    def path(self, name: str) -> str:
        return f"{self.seen_as}/{name}"

    def env(self) -> dict[str, str]:
        return {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "LC_ALL": "C.UTF-8",
            "HOME": self.path("home"),
            "NPUCTL_LIBNOE": self.path("libnoe.so"),
            "NPUCTL_MODELS": self.path("models"),
            "NOE_DOUBLE_DEVICE": self.path("dev-aipu"),
            "NPUCTL_TEFLON": self.path("libteflon.so"),
            "TEFLON_DOUBLE_DEVICE": self.path("accel0"),
            **self.extra_env,
        }

    def command(self, *args: str) -> list[str]:
        environment = [f"{key}={value}" for key, value in self.env().items()]
        return [*self.prefix[:-1], "/usr/bin/env", "-i", *environment, self.prefix[-1], *args]

    def __call__(self, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.command(*args), capture_output=True, text=True, timeout=timeout, check=False
        )


@dataclass(frozen=True)
class Invocation:
    """One real run of a command: its arguments, the exit code it must end with, and what
    its output must show."""

    command: tuple[str, ...]  # the command path it exercises
    args: Callable[[Installed], list[str]]
    code: int | Callable[[Installed], int]
    check: Callable[[Installed, str, str], None]


def _json(schema: str) -> Callable[[Installed, str, str], None]:
    def check(_: Installed, stdout: str, stderr: str) -> None:
        document = json.loads(stdout)
        assert document.get("schema", schema) == schema, document

    return check


def _contains(*words: str, stream: str = "stdout") -> Callable[[Installed, str, str], None]:
    def check(_: Installed, stdout: str, stderr: str) -> None:
        text = stdout if stream == "stdout" else stderr
        for word in words:
            assert word in text, f"{word!r} not in {stream}: {text[-2000:]}"

    return check


def _one_line_error(*words: str) -> Callable[[Installed, str, str], None]:
    def check(_: Installed, stdout: str, stderr: str) -> None:
        lines = stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("npuctl: error: "), stderr
        for word in words:
            assert word in lines[0], lines[0]

    return check


def _detections(_: Installed, stdout: str, stderr: str) -> None:
    assert [d["label"] for d in json.loads(stdout)["detections"]] == ["person"], stdout


def _classified(installed: Installed, stdout: str, stderr: str) -> None:
    if installed.rocket_runtime:
        (image,) = json.loads(stdout)["images"]
        assert len(image["top"]) == 3
    else:
        _one_line_error("ai-edge-litert is not installed")(installed, stdout, stderr)


def _detected_on_rocket(installed: Installed, stdout: str, stderr: str) -> None:
    if installed.rocket_runtime:
        assert isinstance(json.loads(stdout)["detections"], list), stdout
    else:
        _one_line_error("ai-edge-litert is not installed")(installed, stdout, stderr)


def _manifest_written(installed: Installed, stdout: str, stderr: str) -> None:
    text = (installed.scratch / "k8s.yaml").read_text()
    assert "kind: DaemonSet" in text


def _watched(installed: Installed, stdout: str, stderr: str) -> None:
    (sample,) = [json.loads(line) for line in stdout.splitlines()]
    assert len(sample["text"]) > 10, sample


INVOCATIONS: tuple[Invocation, ...] = (
    Invocation(
        (),
        lambda i: ["--version"],
        0,
        lambda i, out, err: re.fullmatch(r"npuctl, version \S+\n", out) or _fail(out),
    ),
    Invocation(
        ("doctor",),
        lambda i: ["--platform", "zhouyi", "doctor", "--quick", "--json"],
        11,  # no Zhouyi NPU here: a failure, reported as findings
        _json("npuctl-doctor/1"),
    ),
    Invocation(
        ("provision",),
        lambda i: ["--platform", "zhouyi", "provision", "--dry-run", "--user", "root"],
        0,
        _contains("[would do] group: add root to group render"),
    ),
    Invocation(("models",), lambda i: ["models", "list", "--json"], 0, _contains("clip-text")),
    Invocation(("models", "list"), lambda i: ["models", "list"], 0, _contains("clip-visual")),
    Invocation(
        ("models", "fetch"),
        lambda i: ["models", "fetch", "no-such-model"],
        2,
        _one_line_error("unknown model 'no-such-model'"),
    ),
    Invocation(("models", "verify"), lambda i: ["models", "verify"], 0, _contains("clip-text")),
    Invocation(
        ("run", "clip-text"),
        lambda i: ["run", "clip-text", "a photo of a cat", "--json"],
        0,
        lambda i, out, err: len(json.loads(out)["embeddings"][0]["embedding"]) == 512 or _fail(out),
    ),
    Invocation(
        ("run", "clip-image"),
        lambda i: ["run", "clip-image", i.path("bus.jpg"), "--json"],
        0,
        lambda i, out, err: len(json.loads(out)["embeddings"][0]["embedding"]) == 512 or _fail(out),
    ),
    Invocation(
        ("run", "yolo"),
        lambda i: ["run", "yolo", i.path("bus.jpg"), "--json"],
        0,
        _detections,
    ),
    *(
        Invocation(
            ("run", name),
            lambda i, name=name: [
                "--platform",
                "rocket",
                "run",
                name,
                "--model",
                i.path("classifier.tflite"),
                "-k",
                "3",
                "--json",
                i.path("picture.png"),
            ],
            lambda i: 0 if i.rocket_runtime else 5,
            _classified,
        )
        for name in ("mobilenet", "mobilenet-v2")
    ),
    Invocation(
        ("run", "ssdlite"),
        lambda i: [
            "--platform",
            "rocket",
            "run",
            "ssdlite",
            "--model",
            i.path("ssd.tflite"),
            "--json",
            i.path("picture.png"),
        ],
        lambda i: 0 if i.rocket_runtime else 5,
        _detected_on_rocket,
    ),
    Invocation(("run",), lambda i: ["run", "clip-text", "a dog"], 0, _contains("512")),
    Invocation(
        ("bench",),
        lambda i: ["bench", "clip-text", "-n", "3", "--warmup", "1", "--json"],
        0,
        lambda i, out, err: "raw_inference" in json.loads(out) or _fail(out),
    ),
    Invocation(
        ("cdi", "generate"),
        lambda i: ["--platform", "zhouyi", "cdi", "generate", "--stdout"],
        11,  # no NPU device here: nothing to describe
        _one_line_error("/dev/aipu is not a character device"),
    ),
    # No driver package is installed where these run: the guard's absence, one line each.
    Invocation(
        ("driver", "trials"),
        lambda i: ["driver", "trials", "aipu"],
        2,
        _one_line_error("no trial guard is installed", "sudo apt install aipu-dkms"),
    ),
    Invocation(
        ("driver", "hold"),
        lambda i: ["driver", "hold", "no-such-module"],
        2,
        _one_line_error("no driver package builds a module 'no-such-module'"),
    ),
    Invocation(
        ("driver", "release"),
        lambda i: ["driver", "release", "rocket"],
        2,
        _one_line_error("sudo apt install rocket-dkms"),
    ),
    Invocation(
        ("driver",),
        lambda i: ["driver", "trials", "rocket", "--json"],
        2,
        _json("npuctl-error/1"),
    ),
    Invocation(("cdi", "list"), lambda i: ["cdi", "list"], 0, _contains("no CDI specs")),
    Invocation(("cdi",), lambda i: ["cdi", "list"], 0, _contains("no CDI specs")),
    Invocation(
        ("k8s", "render"),
        lambda i: ["k8s", "render", "--render-gid", "107", "--output", i.path("k8s.yaml")],
        0,
        _manifest_written,
    ),
    Invocation(("k8s",), lambda i: ["k8s", "render", "--render-gid", "107"], 0, _contains("kind")),
    Invocation(
        ("watch",),
        lambda i: [
            "watch",
            "--count",
            "1",
            "--interval",
            "0",
            "--state-dir",
            i.path("watch"),
            "--json",
        ],
        0,
        _watched,
    ),
    Invocation(
        ("cfg", "check"),
        lambda i: ["cfg", "check", "--json", i.path("model.cfg")],
        0,
        _json("npuctl-cfg-check/1"),
    ),
    Invocation(
        ("cfg",), lambda i: ["cfg", "check", i.path("model.cfg")], 0, _contains("model.cfg")
    ),
)


def _fail(text: str) -> None:
    raise AssertionError(text[-2000:])


def invoke(installed: Installed, invocation: Invocation) -> None:
    result = installed(*invocation.args(installed))
    code = invocation.code if isinstance(invocation.code, int) else invocation.code(installed)
    where = f"npuctl {' '.join(invocation.args(installed))}"
    assert "Traceback" not in result.stderr, f"{where}:\n{result.stderr}"
    assert "internal error" not in result.stderr, f"{where}:\n{result.stderr}"
    assert result.returncode == code, f"{where} exited {result.returncode}:\n{result.stderr}"
    invocation.check(installed, result.stdout, result.stderr)


def serve_answers(installed: Installed) -> None:
    """npuctl serve starts with every model of the board, answers /health, an embedding, a
    DeepStack detection form (curl, as Frigate posts it), a KServe v2 tensor request and
    Immich's client logic (Node) over TCP, and stops on SIGTERM."""
    server = start(None, "--cpu", "all", npuctl=installed.command())
    try:
        assert server.request("GET", "/health").body == b'{"status":"ok"}'
        answer = server.embed({"input": "a photo of a cat", "encoding_format": "float"})
        assert answer.status == 200, answer.body
        assert len(answer.json()["data"][0]["embedding"]) == 512
        form = f"image=@{installed.scratch / 'bus.jpg'}"
        detection = subprocess.run(
            ["curl", "-sS", "--fail-with-body", "-F", form, f"{server.url}/v1/vision/detection"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert detection.returncode == 0, detection.stdout + detection.stderr
        predictions = json.loads(detection.stdout)["predictions"]
        assert [prediction["label"] for prediction in predictions] == ["person"]
        tensor = {"name": "input_ids", "shape": [1, 77], "datatype": "INT32", "data": [0] * 77}
        infer = server.request("POST", "/v2/models/clip-text/infer", {"inputs": [tensor]})
        assert infer.status == 200, infer.body
        (output,) = infer.json()["outputs"]
        assert output["shape"] == [1, 512] and len(output["data"]) == 512
        immich = immich_client([server.url], installed.scratch / "bus.jpg")
        assert len(immich["image"]["vector"]) == len(immich["text"]) == 512
        assert immich["healthyAfterPing"] == {server.url: True}
    finally:
        code = server.stop()
    assert code == 0, server.stderr


def help_pages(installed: Installed) -> Iterator[tuple[tuple[str, ...], str]]:
    """(command path, problem or '') for --help of the program and of every command. The
    processes are independent, so they run side by side, one per core."""
    paths = [(), *command_paths()]
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        results = list(pool.map(lambda path: installed(*path, "--help"), paths))
    for path, result in zip(paths, results, strict=True):
        usage = f"Usage: npuctl {' '.join(path)}".rstrip()
        if result.returncode != 0 or usage not in result.stdout:
            yield path, f"exit {result.returncode}: {(result.stderr or result.stdout)[-800:]}"
        else:
            yield path, ""
