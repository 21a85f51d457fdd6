# ruff: noqa: F811  (the fixtures imported below are parameters of the tests)
"""make image: the container images a fleet deploys, built from Debian's archive with this
project's .debs, loaded into podman and run as a node runs them: non-root, read-only, the NPU
(the libnoe and Teflon doubles) handed in through the node's CDI spec, answered over a
published port by the clients users have. The arm64 image runs under qemu (binfmt)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import yaml
from PIL import Image

import arm64_emulation
from oci_image import workspace
from pipeline.fetch import cache_root
from pipeline.npuctl_package import npuctl_version
from testkit.yolo_outputs import synthetic_output

from .conftest import ImageBuild, run
from .npuctl.board_image import RENDER_GID, BoardImage

# The picture, vocabulary and model builder of npuctl's own tests, as fixtures here too.
from .npuctl.conftest import (  # noqa: F401
    DOUBLE_SOURCE,
    TEFLON_DOUBLE_SOURCE,
    bus_jpg,
    clip_vocab,
    shared_library,
    tflite_classifier,
)
from .npuctl.image_inodes import char_device
from .npuctl.rocket_board import DEVICE as ACCEL_NODE
from .npuctl.rocket_board import RocketBoard

REPO = Path(__file__).resolve().parents[1]
VERSION = npuctl_version()
PODMAN_OPTIONS = ("--runtime", "runc", "--cgroup-manager", "cgroupfs")
# This machine's default limits are above what runc may set in a container.
LIMITS = ("--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024")
LIBNOE = "/usr/share/cix/lib/libnoe.so"
MODELS = "/var/lib/npuctl/models"
READY = re.compile(r"ready: http://")
FULL = os.environ.get("NPUCTL_IMAGE_TESTS") == "full"

pytestmark = pytest.mark.chroot


def image_tool(dist: Path, *args: str, env: dict[str, str] | None = None):
    return subprocess.run(
        [sys.executable, "-m", "oci_image", "--dist", str(dist), *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, **(env or {})},
        timeout=3600,
        check=False,
    )


def build_npuctl_amd64(dist: Path, work: Path, env: dict[str, str] | None = None):
    return image_tool(
        dist,
        "--images",
        "npuctl",
        "--architectures",
        "amd64",
        "build",
        "--work",
        str(work),
        env=env,
    )


def require_image_support() -> str:
    if os.geteuid() != 0:
        pytest.skip("building images needs root (mmdebstrap's root mode) and podman as root")
    missing = [tool for tool in ("mmdebstrap", "podman", "runc") if not shutil.which(tool)]
    if missing:
        pytest.skip(f"image tests need {', '.join(missing)}: run 'make deps'")
    try:
        with urllib.request.urlopen(
            "http://deb.debian.org/debian/dists/trixie/InRelease", timeout=20
        ):
            pass
    except OSError as error:
        pytest.skip(f"Debian's archive cannot be reached ({error}): the images come from it")
    return shutil.which("podman") or "podman"


def podman(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return run("podman", *PODMAN_OPTIONS, *args, timeout=timeout)


def summary(dist: Path, name: str, architecture: str) -> dict:
    path = dist / "images" / f"{name}_{VERSION}_{architecture}.json"
    return json.loads(path.read_text(encoding="utf-8"))


def archive_documents(archive: Path) -> tuple[dict, dict, dict]:
    """index.json, the manifest and the image configuration of an archive."""
    with tarfile.open(archive) as tar:

        def blob(digest: str) -> dict:
            member = tar.extractfile(f"blobs/sha256/{digest.split(':')[1]}")
            assert member is not None
            return json.loads(member.read())

        member = tar.extractfile("index.json")
        assert member is not None
        index = json.loads(member.read())
        manifest = blob(index["manifests"][0]["digest"])
        return index, manifest, blob(manifest["config"]["digest"])


@pytest.fixture(scope="session")
def image_debs(npuctl_debs: dict[str, Path], tmp_path_factory) -> Path:
    """A dist folder with nothing but this source's npuctl .debs, as 'make deb' leaves them."""
    require_image_support()
    dist = tmp_path_factory.mktemp("image-dist")
    for deb in npuctl_debs.values():
        shutil.copy(deb, dist)
    return dist


@pytest.fixture(scope="session")
def amd64_images(image_debs: Path, tmp_path_factory) -> Path:
    """Both images for amd64, built once per session by the command 'make image' runs."""
    result = image_tool(
        image_debs, "--architectures", "amd64", "build", "--work", str(tmp_path_factory.mktemp("w"))
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == [
        f"localhost/npuctl:{VERSION}",
        f"localhost/npuctl-rocket:{VERSION}",
    ]
    for name in ("npuctl", "npuctl-rocket"):
        size = summary(image_debs, name, "amd64")["uncompressed_bytes"]
        print(f"{name} (amd64): {size / 1e6:.0f} MB")
    return image_debs


ARM64_IMAGES = ("npuctl", "npuctl-rocket") if FULL else ("npuctl",)


@pytest.fixture(scope="session")
def arm64_image(image_debs: Path, arm64_image_build: ImageBuild | None, tmp_path_factory) -> Path:
    """The images for arm64, as the boards run them; their maintainer scripts run under qemu
    (about five CPU-minutes an image, most of it byte-compiling Python): 'make test' builds
    the Zhouyi image (started with the session, beside the other tests), 'make check-images'
    both."""
    if missing := arm64_emulation.missing():
        pytest.skip(missing.line())
    if arm64_image_build is not None and ARM64_IMAGES == ("npuctl",):
        code, log = arm64_image_build.result()
        assert code == 0, log
        # beside the amd64 images, as one 'make image' leaves both
        shutil.copytree(
            arm64_image_build.dist / "images", image_debs / "images", dirs_exist_ok=True
        )
        return image_debs
    work = str(tmp_path_factory.mktemp("w64"))
    result = image_tool(
        image_debs,
        "--images",
        ",".join(ARM64_IMAGES),
        "--architectures",
        "arm64",
        "build",
        "--work",
        work,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    for name in ARM64_IMAGES:
        size = summary(image_debs, name, "arm64")["uncompressed_bytes"]
        print(f"{name} (arm64): {size / 1e6:.0f} MB")
    return image_debs


@pytest.fixture(scope="session")
def loaded(amd64_images: Path) -> Iterator[dict[str, str]]:
    """podman load of each amd64 archive: image name by image."""
    names = {}
    for name in ("npuctl", "npuctl-rocket"):
        archive = amd64_images / "images" / f"{name}_{VERSION}_amd64.oci.tar"
        result = podman("load", "-i", str(archive))
        assert result.returncode == 0, result.stderr
        names[name] = f"localhost/{name}:{VERSION}"
        assert names[name] in result.stdout
    yield names
    for name in names.values():
        podman("rmi", "-f", name)


# -- what the image is -----------------------------------------------------------------------
def test_an_image_says_what_it_is_and_runs_as_a_fleet_expects(amd64_images: Path):
    archive = amd64_images / "images" / f"npuctl_{VERSION}_amd64.oci.tar"
    index, manifest, config = archive_documents(archive)
    assert index["manifests"][0]["annotations"]["io.containerd.image.name"] == (
        f"localhost/npuctl:{VERSION}"
    )
    assert index["manifests"][0]["platform"] == {"architecture": "amd64", "os": "linux"}
    labels = config["config"]["Labels"]
    revision = run("git", "-C", REPO, "rev-parse", "HEAD").stdout.strip()
    assert labels["org.opencontainers.image.version"] == VERSION
    assert labels["org.opencontainers.image.revision"] == revision
    assert labels["org.opencontainers.image.licenses"] == "GPL-2.0-only"
    assert labels["org.opencontainers.image.source"].startswith("https://")
    assert config["config"]["User"] == "65534:65534"
    assert config["config"]["StopSignal"] == "SIGTERM"
    assert config["config"]["Healthcheck"]["Test"] == [
        "CMD",
        "python3",
        "-m",
        "npuctl.serve.healthcheck",
    ]
    assert config["config"]["Entrypoint"] == ["npuctl"]
    assert {"8340/tcp", "5555/tcp"} <= set(config["config"]["ExposedPorts"])
    assert (
        manifest["layers"][0]["digest"] == summary(amd64_images, "npuctl", "amd64")["layer_digest"]
    )
    # The packages come from the .debs, as on a board: dpkg knows them.
    sbom = json.loads((amd64_images / "images" / f"npuctl_{VERSION}_amd64.spdx.json").read_text())
    assert sbom["spdxVersion"] == "SPDX-2.3"
    purls = {
        ref["referenceLocator"]
        for package in sbom["packages"]
        for ref in package.get("externalRefs", [])
    }
    assert f"pkg:deb/debian/npuctl@{VERSION}?arch=all&distro=debian-13" in purls
    assert (
        f"pkg:deb/debian/npuctl-serve@{VERSION}?arch=all&distro=debian-13&upstream=npuctl" in purls
    )
    assert any(purl.startswith("pkg:deb/debian/python3-numpy@") for purl in purls)
    assert not any("npuctl-watch" in purl for purl in purls)
    assert not any(purl.startswith("pkg:pypi/") for purl in purls)  # nothing vendor-owned
    rocket = json.loads(
        (amd64_images / "images" / f"npuctl-rocket_{VERSION}_amd64.spdx.json").read_text()
    )
    rocket_purls = {
        ref["referenceLocator"]
        for package in rocket["packages"]
        for ref in package.get("externalRefs", [])
    }
    assert "pkg:pypi/ai-edge-litert@2.3.0" in rocket_purls
    limits = {
        name: yaml.safe_load((REPO / "images" / f"{name}.yaml").read_text())["size_limit_mb"]
        for name in ("npuctl", "npuctl-rocket")
    }
    for name, limit in limits.items():
        assert summary(amd64_images, name, "amd64")["uncompressed_bytes"] <= limit * 1e6


def start_amd64(dist: Path, work: Path, images: str = "npuctl") -> subprocess.Popen[str]:
    """The build as a script's background job starts it: with SIGINT ignored (a
    non-interactive shell's '&'), which a Ctrl-C or 'kill -INT' must still stop."""
    return subprocess.Popen(
        [
            *(sys.executable, "-m", "oci_image", "--dist", str(dist), "--images", images),
            *("--architectures", "amd64", "build", "--work", str(work)),
        ],
        preexec_fn=ignore_sigint,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )


def ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def wait_for_mounts(build: subprocess.Popen[str], *folders: Path) -> None:
    """Until mmdebstrap has mounted the .debs inside each folder (bounded)."""
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and build.poll() is None:
        if all(
            any(p.name.endswith(".deb") for p in workspace.mounts_inside(folder))
            for folder in folders
        ):
            return
        time.sleep(0.1)
    raise AssertionError(f"no .deb was mounted in each of {folders}: {build.poll()}")


def test_an_interrupted_build_cleans_up_and_the_next_gives_the_same_image(
    amd64_images: Path, tmp_path: Path
):
    again, work = tmp_path / "dist", tmp_path / "w"
    again.mkdir()
    for deb in amd64_images.glob("*.deb"):
        shutil.copy(deb, again)
    # Ctrl-C, and a timeout's SIGTERM, part-way: nothing stays mounted, no process stays.
    for signum, status, said in (
        (signal.SIGINT, 130, "interrupted"),
        (signal.SIGTERM, 143, "stopped by SIGTERM"),
    ):
        build = start_amd64(again, work)
        wait_for_mounts(build, work)
        build.send_signal(signum)
        _, stderr = build.communicate(timeout=120)
        assert build.returncode == status, stderr
        assert stderr.strip().splitlines()[-1] == f"image: {said}; nothing is left mounted"
        assert workspace.mounts_inside(work) == []
        assert run("pgrep", "-f", f"mmdebstrap.*{work}").stdout == ""
    # Two images built side by side, each in a thread of its own, which the signal does not
    # reach: both builds stop and undo their mounts before the tool says so.
    build = start_amd64(again, work, "npuctl,npuctl-rocket")
    wait_for_mounts(build, work / "npuctl-amd64", work / "npuctl-rocket-amd64")
    build.send_signal(signal.SIGTERM)
    _, stderr = build.communicate(timeout=120)
    assert build.returncode == 143, stderr
    assert stderr.strip().splitlines()[-1] == "image: stopped by SIGTERM; nothing is left mounted"
    assert workspace.mounts_inside(work) == []
    assert run("pgrep", "-f", f"mmdebstrap.*{work}").stdout == ""
    # Killed outright (the OOM killer, kill -9 of the job): its mounts stay behind ...
    build = start_amd64(again, work)
    wait_for_mounts(build, work)
    mmdebstrap = run("pgrep", "-f", f"mmdebstrap.*{work}").stdout.split()
    build.kill()
    build.communicate(timeout=60)
    for pid in mmdebstrap:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(int(pid), signal.SIGKILL)
    assert workspace.mounts_inside(work), "the control: a killed build leaves its mounts"
    # ... and the next build takes away what that build of its own left, then builds.
    result = build_npuctl_amd64(again, work)
    assert result.returncode == 0, result.stderr[-3000:]
    assert workspace.mounts_inside(work) == []
    first, second = summary(amd64_images, "npuctl", "amd64"), summary(again, "npuctl", "amd64")
    for key in ("layer_diff_id", "layer_digest", "config_digest", "manifest_digest"):
        assert first[key] == second[key], key
    name = f"npuctl_{VERSION}_amd64.oci.tar"
    assert (amd64_images / "images" / name).read_bytes() == (again / "images" / name).read_bytes()


def test_a_folder_with_mounts_of_someone_else_is_refused_and_kept(image_debs: Path, tmp_path: Path):
    work, kept = tmp_path / "w", tmp_path / "kept"
    kept.mkdir()
    (kept / "file").write_text("not the build's")
    inside = work / "npuctl-amd64" / "mine"
    inside.mkdir(parents=True)
    assert run("mount", "--bind", kept, inside).returncode == 0
    try:
        result = build_npuctl_amd64(image_debs, work)
        assert result.returncode == 7 and "Traceback" not in result.stderr, result.stderr
        said = result.stderr.strip().splitlines()[-1]
        assert said.startswith("image: ") and "has mounts inside that no build" in said
        assert (inside / "file").read_text() == "not the build's"
    finally:
        run("umount", inside)
    assert (kept / "file").read_text() == "not the build's"


def test_k8s_render_takes_the_name_the_build_printed(amd64_images: Path, tmp_path: Path):
    for family, image in (("zhouyi", "npuctl"), ("rocket", "npuctl-rocket")):
        printed = f"localhost/{image}:{VERSION}"
        for extra in ((), ("--image", printed)):
            result = run(
                sys.executable, "-m", "npuctl", "k8s", "render", "--family", family, *extra
            )
            assert result.returncode == 0, result.stderr
            daemonset = next(yaml.safe_load_all(result.stdout))
            assert daemonset["spec"]["template"]["spec"]["containers"][0]["image"] == printed


# -- bad input: one line, a documented exit code, nothing in dist/images ----------------------
def only_line(result: subprocess.CompletedProcess[str]) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


def test_a_missing_deb_is_one_line_and_no_image(tmp_path: Path):
    dist = tmp_path / "dist"
    dist.mkdir()
    result = image_tool(dist, "--architectures", "amd64", "build", "--work", str(tmp_path / "w"))
    assert result.returncode == 3
    assert f"npuctl_{VERSION}_all.deb is missing" in only_line(result)
    assert "make deb" in only_line(result)
    assert not (dist / "images").exists() or not any((dist / "images").iterdir())


def test_an_unreachable_archive_is_one_line_and_no_image(image_debs: Path, tmp_path: Path):
    result = build_npuctl_amd64(
        image_debs, tmp_path / "w", env={"DEBIAN_MIRROR": "http://127.0.0.1:9/debian"}
    )
    assert result.returncode == 4
    assert "cannot reach Debian's archive at http://127.0.0.1:9/debian" in only_line(result)
    assert not (image_debs / "images").exists() or not list((image_debs / "images").glob(".*"))


def test_a_count_of_builds_that_is_none_is_a_usage_error(tmp_path: Path):
    result = image_tool(tmp_path, "build", "--jobs", "0", "--work", str(tmp_path / "w"))
    assert result.returncode == 2
    assert "'0' is not a count of builds (1 or more)" in result.stderr.splitlines()[-1]
    assert "Traceback" not in result.stderr and not (tmp_path / "w").exists()


def test_a_push_without_the_images_is_one_line(tmp_path: Path):
    result = image_tool(tmp_path, "--images", "npuctl", "push", "--registry", "127.0.0.1:9/x")
    assert result.returncode == 3
    assert "is missing: build it first ('make image')" in only_line(result)


# -- the images at work, under podman ----------------------------------------------------------
@dataclass
class Container:
    name: str
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@pytest.fixture
def cdi_spec_dir() -> Iterator[Path]:
    """podman reads /etc/cdi; the tests' specs go there and only there, and leave."""
    directory = Path("/etc/cdi")
    taken = [directory / f"{vendor}.yaml" for vendor in ("armchina.com", "rockchip.com")]
    foreign = [path for path in taken if path.exists()]
    if foreign:
        pytest.skip(f"{foreign[0]} exists on this machine; the tests do not replace it")
    yield directory
    for path in taken:
        path.unlink(missing_ok=True)


def generate_cdi(root: Path, *options: str) -> None:
    result = run(
        sys.executable,
        "-m",
        "npuctl",
        *options,
        "cdi",
        "generate",
        env={**os.environ, "NPUCTL_ROOT": str(root)},
    )
    assert result.returncode == 0, result.stderr


def serve(image: str, device: str, models: Path, name: str) -> Container:
    """The image as a node runs it: its own command, non-root, root file system read-only with
    no scratch space either, the NPU by CDI, the node's models read-only."""
    podman("rm", "-f", name)
    started = podman(
        "run",
        "--detach",
        "--name",
        name,
        *LIMITS,
        "--read-only",
        "--read-only-tmpfs=false",
        "--cap-drop=all",
        "--security-opt=no-new-privileges",
        "--device",
        device,
        "--group-add",
        str(RENDER_GID),
        "--volume",
        f"{models}:{MODELS}:ro",
        "--publish",
        "127.0.0.1::8340",
        "--health-interval=disable",  # no systemd timers here; the test runs the check itself
        image,
    )
    assert started.returncode == 0, started.stderr
    logs = subprocess.Popen(
        ["podman", *PODMAN_OPTIONS, "logs", "--follow", name],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert logs.stdout is not None
    seen = []
    for line in logs.stdout:  # until the server says it is ready, or the container ends
        seen.append(line)
        if READY.search(line):
            break
    logs.kill()
    logs.wait()
    assert any(READY.search(line) for line in seen), "".join(seen)
    port = podman("port", name, "8340/tcp").stdout.strip().rsplit(":", 1)[1]
    return Container(name, int(port))


def stop(container: Container) -> None:
    stopped = podman("stop", "--time", "30", container.name)
    assert stopped.returncode == 0, stopped.stderr
    state = podman("inspect", "--format", "{{.State.ExitCode}}", container.name)
    logs = podman("logs", container.name)
    podman("rm", "-f", container.name)
    assert state.stdout.strip() == "0", logs.stdout + logs.stderr  # SIGTERM ends it cleanly


def curl_form(url: str, *fields: str) -> dict:
    command = ["curl", "-sS", "--fail-with-body", url]
    for field in fields:
        command += ["-F", field]
    result = run(*command, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout)


def inside(container: Container, *command: str) -> str:
    result = podman("exec", container.name, *command)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_the_zhouyi_image_serves_embeddings_detection_and_v2_through_cdi(
    loaded: dict[str, str], cdi_spec_dir: Path, tmp_path: Path, clip_vocab: Path, bus_jpg: Path
):
    openai = pytest.importorskip("openai", reason="the openai client is a dev dependency")
    httpclient = pytest.importorskip("tritonclient.http", reason="tritonclient is a dev dependency")
    board = BoardImage(tmp_path / "node")
    board.device(0o660)
    (board.root / LIBNOE.lstrip("/")).parent.mkdir(parents=True)
    shared_library(DOUBLE_SOURCE, board.root / LIBNOE.lstrip("/"))
    generate_cdi(board.root, "--library", LIBNOE)
    models = tmp_path / "models"
    models.mkdir()
    models.chmod(0o755)
    canned = synthetic_output([(0, 0.9, 200, 330, 120, 400), (5, 0.8, 400, 300, 300, 200)])
    (models / "yolo-output.bin").write_bytes(canned.tobytes())
    shutil.copy(clip_vocab, models / clip_vocab.name)
    specs = {
        "yolov8n.cix": (["U8 1228800 255.0 0"], [f"F16 1411200 1.0 0 {MODELS}/yolo-output.bin"]),
        "clip_txt.cix": (["S32 308 1.0 0"], ["S8 512 27.67 60"]),
        "clip_visual.cix": (["U8 150528 64.75 12"], ["S8 512 29.52 -80"]),
    }
    for file, (inputs, outputs) in specs.items():
        lines = ["NOEDOUBLE 1", *(f"input {i}" for i in inputs), *(f"output {o}" for o in outputs)]
        (models / file).write_text("\n".join(lines) + "\n")
    for path in models.iterdir():
        path.chmod(0o644)

    container = serve(loaded["npuctl"], "armchina.com/npu=0", models, "npuctl-image-zhouyi")
    try:
        assert inside(container, "id", "-u") == "65534"
        assert podman("healthcheck", "run", container.name).returncode == 0
        client = openai.OpenAI(base_url=container.url + "/v1", api_key="unused", max_retries=0)
        embedded = client.embeddings.create(model="clip-text", input=["a bus on a street"])
        assert len(embedded.data[0].embedding) == 512
        found = curl_form(
            container.url + "/v1/vision/detection", f"image=@{bus_jpg}", "min_confidence=0.5"
        )
        assert found["success"] is True
        assert [p["label"] for p in found["predictions"]] == ["person", "bus"]
        triton = httpclient.InferenceServerClient(f"127.0.0.1:{container.port}")
        assert triton.is_server_ready() and triton.is_model_ready("yolov8n")
        pixels = httpclient.InferInput("images", [1, 3, 640, 640], "UINT8")
        pixels.set_data_from_numpy(np.full((1, 3, 640, 640), 114, np.uint8))
        answer = triton.infer("yolov8n", [pixels]).as_numpy("output0")
        assert np.array_equal(answer.reshape(84, -1), canned)
    finally:
        stop(container)


def test_the_rocket_image_serves_detection_classification_and_v2_through_cdi(
    loaded: dict[str, str], cdi_spec_dir: Path, tmp_path: Path, tflite_classifier
):
    pytest.importorskip("tflite", reason="PyPI's tflite builds the test models: run 'make deps'")
    from testkit.tflite_models import ssd_detector

    delegate = shared_library(TEFLON_DOUBLE_SOURCE, tmp_path / "libteflon.so")
    board = RocketBoard(tmp_path / "node", delegate)
    char_device(board.root, ACCEL_NODE, 0o660, RENDER_GID, 1, 3)  # opens like /dev/null
    generate_cdi(board.root)
    models = tmp_path / "models"
    models.mkdir()
    ssd_detector(models / "ssdlite_mobiledet_coco_qat_postprocess.tflite")
    shutil.copyfile(
        tflite_classifier("mobilenet_v1_1.0_224_quant.tflite", classes=1001, seed=7),
        models / "mobilenet_v1_1.0_224_quant.tflite",
    )
    labels = [f"label {n}" for n in range(1001)]
    (models / "labels_mobilenet_quant_v1_224.txt").write_text("\n".join(labels) + "\n")
    models.chmod(0o755)
    for path in models.iterdir():
        path.chmod(0o644)
    street = tmp_path / "street.jpg"
    rng = np.random.default_rng(5)
    Image.fromarray(rng.integers(0, 256, (240, 320, 3), dtype=np.uint8)).save(street, quality=95)

    container = serve(loaded["npuctl-rocket"], "rockchip.com/npu=0", models, "npuctl-image-rocket")
    try:
        assert inside(container, "id", "-u") == "65534"
        assert podman("healthcheck", "run", container.name).returncode == 0
        found = curl_form(
            container.url + "/v1/vision/detection", f"image=@{street}", "min_confidence=0.1"
        )
        assert found["success"] is True and found["predictions"]
        classes = curl_form(
            container.url + "/v1/vision/classification", f"image=@{street}", "top_k=3"
        )
        assert classes["success"] is True and len(classes["predictions"]) == 3
        metadata = json.loads(urllib.request.urlopen(container.url + "/v2/models/mobilenet").read())
        tensor = metadata["inputs"][0]
        request = {
            "inputs": [
                {
                    "name": tensor["name"],
                    "datatype": tensor["datatype"],
                    "shape": tensor["shape"],
                    "data": [0] * int(np.prod(tensor["shape"])),
                }
            ]
        }
        answer = urllib.request.urlopen(
            urllib.request.Request(
                container.url + "/v2/models/mobilenet/infer",
                data=json.dumps(request).encode(),
                headers={"Content-Type": "application/json"},
            )
        )
        assert json.loads(answer.read())["outputs"][0]["shape"] == [1, 1001]
    finally:
        stop(container)


# -- arm64, as the boards run it ---------------------------------------------------------------
def test_the_arm64_image_runs_npuctl_under_emulation(arm64_image: Path):
    for name in ARM64_IMAGES:
        archive = arm64_image / "images" / f"{name}_{VERSION}_arm64.oci.tar"
        index, _, config = archive_documents(archive)
        assert config["architecture"] == "arm64" and config["variant"] == "v8"
        assert index["manifests"][0]["platform"]["architecture"] == "arm64"
    image = f"localhost/npuctl-arm64-test:{VERSION}"
    archive = arm64_image / "images" / f"npuctl_{VERSION}_arm64.oci.tar"
    loaded = podman("load", "-i", str(archive))
    assert loaded.returncode == 0, loaded.stderr
    podman("tag", f"localhost/npuctl:{VERSION}", image)
    # The image is unchanged; only the emulator's CPU is the faster one (arm64_emulation).
    emulated = (*LIMITS, "--env", f"QEMU_CPU={arm64_emulation.QEMU_CPU}")
    try:
        machine = podman("run", "--rm", *emulated, "--entrypoint", "uname", image, "-m")
        assert machine.stdout.strip() == "aarch64", machine.stderr
        version = podman("run", "--rm", *emulated, image, "--version")
        assert version.returncode == 0 and version.stdout.strip() == f"npuctl, version {VERSION}"
        doctor = podman("run", "--rm", *emulated, "--read-only", image, "doctor", "--json")
        report = json.loads(doctor.stdout)
        assert report["checks"] and doctor.returncode != 0  # no NPU in this container
    finally:
        podman("rmi", "-f", image)


@dataclass
class Registry:
    process: subprocess.Popen
    port: int


def local_registry(tmp_path: Path) -> Registry:
    """Debian's docker-registry (the CNCF distribution registry), taken from the archive into
    the cache and run on a free port of this machine, over plain HTTP."""
    cache = cache_root() / "tools"
    binary = cache / "docker-registry" / "usr/bin/docker-registry"
    if not binary.exists():
        cache.mkdir(parents=True, exist_ok=True)
        fetched = run("apt-get", "download", "docker-registry", cwd=cache, timeout=300)
        if fetched.returncode != 0:
            pytest.skip(
                f"docker-registry cannot be fetched from Debian's archive: {fetched.stderr}"
            )
        deb = next(cache.glob("docker-registry_*.deb"))
        unpacked = run("dpkg-deb", "-x", deb, cache / "docker-registry")
        assert unpacked.returncode == 0, unpacked.stderr
        deb.unlink()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = tmp_path / "registry.yml"
    config.write_text(
        yaml.safe_dump(
            {
                "version": 0.1,
                "storage": {"filesystem": {"rootdirectory": str(tmp_path / "blobs")}},
                "http": {"addr": f"127.0.0.1:{port}"},
            }
        )
    )
    process = subprocess.Popen(
        [binary, "serve", config], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    assert process.stderr is not None
    for line in process.stderr:  # the registry says when it listens
        if "listening on" in line:
            break
    else:
        raise AssertionError(f"docker-registry ended: {process.wait()}")
    threading.Thread(target=process.stderr.read, daemon=True).start()
    return Registry(process, port)


def test_both_architectures_go_to_a_registry_under_one_name(
    arm64_image: Path, amd64_images: Path, tmp_path: Path
):
    registry = local_registry(tmp_path)
    try:
        result = image_tool(
            amd64_images,
            "--images",
            "npuctl",
            "push",
            "--registry",
            f"127.0.0.1:{registry.port}/fleet",
            "--no-tls-verify",
        )
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == f"127.0.0.1:{registry.port}/fleet/npuctl:{VERSION}"
        request = urllib.request.Request(
            f"http://127.0.0.1:{registry.port}/v2/fleet/npuctl/manifests/{VERSION}",
            headers={
                "Accept": "application/vnd.docker.distribution.manifest.list.v2+json, "
                "application/vnd.oci.image.index.v1+json"
            },
        )
        listed = json.loads(urllib.request.urlopen(request, timeout=30).read())
        platforms = sorted(entry["platform"]["architecture"] for entry in listed["manifests"])
        assert platforms == ["amd64", "arm64"]
    finally:
        registry.process.terminate()
        registry.process.wait(30)
