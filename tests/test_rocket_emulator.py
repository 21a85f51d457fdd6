"""make check-rocket-emu: the Orange Pi 5 Plus in QEMU with the RK3588 NPU model. Debian's
backports kernel boots with the rocket.ko that DKMS built from this project's rocket-dkms
.deb; under each pinned Teflon in turn (trixie-backports' Mesa 26.1, then sid's 26.2 installed
over it) npuctl doctor runs on the board and npuctl's golden check compares NPU and CPU on
every case; then npuctl serve answers requests over the guest's network. One boot serves
every test; its console is kept in build/rocket-emu/console.log, every NPU job's register
commands in build/rocket-emu/regcmds.log.

With NPUCTL_ROCKET_EMU=full (set by 'make check-rocket-emu', after 'make deb') the .debs
are dist/'s. Otherwise ('make test') they are this session's builds, and the tests run only
when QEMU and the guest root for that rocket-dkms .deb are cached; they say why they skip
otherwise."""

from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from npuctl.platforms.rocket.hardware import evidence
from pipeline.atomic import write_atomically
from rocket_emu import (
    board,
    captures,
    guest_root,
    pad_lanes,
    peer_suite,
    qemu_build,
    registers,
    sources,
)
from rocket_emu.__main__ import missing_from_cache
from rocket_emu.pins import load
from rocket_emu.tables import REPORT_SCHEMA
from testkit.tflite_cut import Operation, cut, delegated
from testkit.tflite_models import (
    MESA_TABLE,
    MOBILEDET_ADDITIONS,
    MOBILENET_V1_BODY,
    MOBILENET_V2_ADDITIONS,
    MOBILENET_V2_BODY,
    MOBILENET_V2_PUBLISHED_ADDITIONS,
    ConvLayer,
    ScaledAddition,
    conv_stack,
    ssdlite_detector,
    ssdlite_mobiledet,
    ssdlite_mobiledet_own_scales,
)

from .conftest import started_beside
from .test_patches import DEP3_FIELDS

REPO = Path(__file__).resolve().parents[1]
DIST = REPO / "dist"
WORK = REPO / "build" / "rocket-emu"
FULL = os.environ.get("NPUCTL_ROCKET_EMU") == "full"
PINS = load()
CASES = {case["name"]: case for case in PINS.data["golden_cases"]}
# The published models (Coral's test data, emulation/rk3588.yaml: published), cached by
# 'python -m rocket_emu prepare --coral-git': their cases run as Mesa's tests do.
PUBLISHED = sources.published_cache(PINS)
NOT_PUBLISHED = (
    "the published models are not cached: make check-rocket-emu CORAL_GIT=<a clone of "
    "google-coral/test_data>"
)
# Mesa's own Teflon test models (emulation/rk3588.yaml: mesa_tests), out of Debian's orig
# tarball of Mesa, cached by 'python -m rocket_emu prepare' (make check-rocket-emu).
MESA_TESTS = sources.mesa_tests_cache(PINS)
# Where each set of pinned files is cached, and why its cases skip without it.
PINNED_FILES = {
    "published": (PUBLISHED, NOT_PUBLISHED),
    "mesa_tests": (MESA_TESTS, sources.NOT_MESA_TESTS),
}
# A peer's hardware-validated gates (emulation/rk3588.yaml: peer_suite), built for arm64 and
# cached by 'python -m rocket_emu prepare --peer-git'.
PEER = PINS.data["peer_suite"]
PEER_GATES = {gate["name"]: gate for gate in PEER["gates"]}
CAPTURES = {capture["name"]: capture for capture in PEER.get("captures", [])}
NOT_PEER = (
    "the peer's gates are not built: make check-rocket-emu PEER_GIT=<a clone of "
    "gregordinary/rocket-userspace>"
)
MESA_TOLERANCE = evidence().tolerance  # Mesa's tests: largest element difference at most 6
TEFLONS = PINS.teflon_versions  # in the order the board runs them; serve runs under the last
FIRST_TEFLON, SERVED_TEFLON = TEFLONS[0], TEFLONS[-1]
REGISTER_LISTINGS = DIST / "rocket-emu-registers"  # each case's registers, per Teflon
# A linear 1x1 projection to 24 channels, then one inverted-residual block (MobileNetV2's).
INVERTED_RESIDUAL = [
    ConvLayer(24, linear=True),
    ConvLayer(144),
    ConvLayer(0, depthwise=True),
    ConvLayer(24, linear=True, residual=True),
]
BUILDERS = {
    "conv1x1-16-8x8": dict(layers=[ConvLayer(16)], size=8, channels=16),
    "conv1x1-32-64-96x96": dict(layers=[ConvLayer(64)], size=96, channels=32),
    "mobilenet-v1-body-128": dict(layers=MOBILENET_V1_BODY, size=128),
    "mobilenet-v1-body-224": dict(layers=MOBILENET_V1_BODY, size=224),
    "mobilenet-v1-classifier": dict(layers=MOBILENET_V1_BODY, size=224, classes=1001),
    "conv1x1-32-64-112x112": dict(layers=[ConvLayer(64)], size=112, channels=32),
    "conv3x3-3-16-32x32": dict(layers=[ConvLayer(16, kernel=3)], size=32),
    "separable-16-32-16x16": dict(
        layers=[ConvLayer(0, depthwise=True), ConvLayer(32)], size=16, channels=16
    ),
    "conv1x1-64-64-80x80": dict(layers=[ConvLayer(64)], size=80, channels=64),
    "mobilenet-v1-classifier-128": dict(layers=MOBILENET_V1_BODY, size=128, classes=1001),
    "conv1x1-16-8x8-int8": dict(layers=[ConvLayer(16)], size=8, channels=16, signed=True),
    "conv1x1-144-42-14x14": dict(layers=[ConvLayer(42)], size=14, channels=144),
    "separable-144-24-28x28": dict(
        layers=[ConvLayer(0, depthwise=True), ConvLayer(24)], size=28, channels=144
    ),
    "conv1x1-1024-288-7x7": dict(layers=[ConvLayer(288)], size=7, channels=1024),
    "conv1x1-1024-352-7x7": dict(layers=[ConvLayer(352)], size=7, channels=1024),
    "inverted-residual-24-56x56": dict(layers=INVERTED_RESIDUAL, size=56, channels=24),
    # The same block with room: the operand at a linear layer's scale (12/255), the
    # projection and the sum quantized to [-20, 20] (40/255), where they never clamp.
    "inverted-residual-24-56x56-room": dict(
        layers=INVERTED_RESIDUAL,
        size=56,
        channels=24,
        additions=(ScaledAddition(12 / 255, 40 / 255),),
    ),
    "mobilenet-v2-classifier": dict(layers=MOBILENET_V2_BODY, size=224, classes=1001),
    **{
        f"conv1x1-{channels}-24-14x14": dict(
            layers=[ConvLayer(24, linear=True)], size=14, channels=channels
        )
        for channels in (16, 17, 24, 31, 32)
    },
    "conv1x1-24-64-relu6-14x14": dict(layers=[ConvLayer(64)], size=14, channels=24),
    "mobilenet-v2-classifier-table-scales": dict(
        layers=MOBILENET_V2_BODY,
        size=224,
        classes=1001,
        additions=MOBILENET_V2_ADDITIONS,
    ),
    "mobilenet-v2-published-scales": dict(
        layers=MOBILENET_V2_BODY,
        size=224,
        classes=1001,
        additions=MOBILENET_V2_PUBLISHED_ADDITIONS,
    ),
}
# Models of another kind than a convolution stack, by their builder.
DETECTORS: dict[str, Callable[[Path], Path]] = {
    "ssdlite-detector-320": ssdlite_detector,
    "ssdlite-mobiledet-320": ssdlite_mobiledet,
    "ssdlite-mobiledet-320-own-scales": ssdlite_mobiledet_own_scales,
}
SERVED_MODEL = "mobilenet_v1_1.0_224_quant.tflite"
SERVED_DETECTOR = "ssdlite_mobiledet_coco_qat_postprocess.tflite"  # the manifest's file name
GOLDEN_PHOTO = "grace_hopper.bmp"  # the manifest's golden-photo, pinned in both files
SERVED_DETECTOR_CASE = "ssdlite-mobiledet-320"  # what it is built as
SERVED_V2 = "mobilenet_v2_1.0_224_quant.tflite"
SERVED_V2_CASE = "mobilenet-v2-published-scales"  # what it is built as: the published scales
CORES = ("fdab0000", "fdac0000", "fdad0000")  # the board's three NPU cores, by address
CONCURRENT = 3  # clients at once: one per core
LABELS = "labels_mobilenet_quant_v1_224.txt"


def test_every_case_has_a_builder():
    published = {name for name, case in CASES.items() if "published" in case}
    assert set(CASES) == set(BUILDERS) | set(DETECTORS) | published
    assert not set(BUILDERS) & set(DETECTORS)
    assert not (set(BUILDERS) | set(DETECTORS)) & published
    for name in published:  # a published file the pins name, checked by its sha256
        found = CASES[name]["published"]
        assert found["file"] in PINS.data[found.get("from", "published")]["files"], name
        assert CASES[name].get("picture", GOLDEN_PHOTO) in PINS.data["published"]["files"]


def _published_file(name: str) -> Path:
    """The pinned file a published case runs (whole, or the operation it cuts out)."""
    found = CASES[name]["published"]
    return PINNED_FILES[found.get("from", "published")][0] / found["file"]


def _not_cached(name: str) -> str | None:
    """Why a published case cannot run here (its pinned files, or its photograph, not
    cached), else None."""
    if "published" not in CASES[name]:
        return None
    folder, reason = PINNED_FILES[CASES[name]["published"].get("from", "published")]
    if not folder.is_dir():
        return reason
    return NOT_PUBLISHED if "picture" in CASES[name] and not PUBLISHED.is_dir() else None


def _fake_mesa_source(tmp_path: Path, members: dict[str, bytes]) -> tuple[Path, dict]:
    """An orig tarball of Mesa with ``members`` in its test folder, in a pool of an archive
    at ``tmp_path``, and the pins of two of them."""
    import hashlib
    import tarfile

    folder = "mesa-1.0/src/gallium/targets/teflon/tests"
    pool = tmp_path / "archive" / "pool/main/m/mesa"
    pool.mkdir(parents=True)
    tarball = pool / "mesa_1.0.orig.tar.xz"
    staged = tmp_path / "staged"
    for name, data in members.items():
        (staged / folder).mkdir(parents=True, exist_ok=True)
        (staged / folder / name).write_bytes(data)
    with tarfile.open(tarball, "w:xz") as archive:
        archive.add(staged / "mesa-1.0", "mesa-1.0")
    pinned = {
        "repository": "https://gitlab.freedesktop.org/mesa/mesa",
        "pool": "pool/main/m/mesa",
        "tarball": tarball.name,
        "sha256": hashlib.sha256(tarball.read_bytes()).hexdigest(),
        "folder": folder,
        "files": {
            name: hashlib.sha256(members[name]).hexdigest() for name in ("a.tflite", "b.tflite")
        },
    }
    return tmp_path / "archive", pinned


def test_mesas_test_models_come_pinned_from_the_archive(tmp_path, monkeypatch):
    """Mesa's test models: Debian's orig tarball of Mesa from the archive (DEBIAN_MIRROR),
    kept only at its pinned sha256, and only the pinned members unpacked, each checked by
    its own sha256; a tarball or a member that is not the pinned one leaves nothing cached."""
    from rocket_emu.errors import EmulationError
    from rocket_emu.pins import Pins

    members = {"a.tflite": b"first", "b.tflite": b"second", "c.tflite": b"not pinned"}
    archive, pinned = _fake_mesa_source(tmp_path, members)
    monkeypatch.setenv("AIPU_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("DEBIAN_MIRROR", archive.as_uri())
    found = sources.mesa_test_files(Pins({**PINS.data, "mesa_tests": pinned}))
    assert found == sources.mesa_tests_cache(Pins({**PINS.data, "mesa_tests": pinned}))
    assert sorted(path.name for path in found.iterdir()) == ["a.tflite", "b.tflite"]
    assert (found / "b.tflite").read_bytes() == b"second"
    assert (tmp_path / "cache" / "sources" / pinned["tarball"]).is_file()

    wrong_member = {**pinned, "files": {**pinned["files"], "a.tflite": "0" * 64}}
    with pytest.raises(EmulationError, match=r"a\.tflite in mesa_1\.0\.orig\.tar\.xz has sha256"):
        sources.mesa_test_files(Pins({**PINS.data, "mesa_tests": wrong_member}))
    wrong_tarball = {**wrong_member, "sha256": "1" * 64}
    (tmp_path / "cache" / "sources" / pinned["tarball"]).unlink()
    with pytest.raises(EmulationError, match="pins 1111") as raised:
        sources.mesa_test_files(Pins({**PINS.data, "mesa_tests": wrong_tarball}))
    assert "\n" not in str(raised.value)
    missing = {**pinned, "files": {"d.tflite": "2" * 64}}
    with pytest.raises(EmulationError, match="lacks some of the pinned members"):
        sources.mesa_test_files(Pins({**PINS.data, "mesa_tests": missing}))
    assert [path.name for path in sources.cache().iterdir()] == [found.name]  # no partials
    assert not list((tmp_path / "cache" / "sources").glob(".*")), "a partial download was kept"


PT_INTERP = 3  # an ELF program header naming the dynamic loader


def elf_segment_types(program: bytes) -> list[int]:
    """The types of a 64-bit little-endian ELF file's program headers."""
    offset = int.from_bytes(program[32:40], "little")
    size = int.from_bytes(program[54:56], "little")
    count = int.from_bytes(program[56:58], "little")
    return [
        int.from_bytes(program[offset + n * size : offset + n * size + 4], "little")
        for n in range(count)
    ]


def _fake_peer(tmp_path: Path) -> tuple[Path, Path, dict]:
    """A peer's repository (a library of two sources its CMakeLists lists, a gate, the
    fixtures folder), an archive with the two header .debs, and the pins of them."""
    import hashlib

    tree = tmp_path / "peer"
    files = {
        "CMakeLists.txt": "set(ROCKETNPU_SOURCES\n    src/a.c   # one (of two)\n    src/b.c)\n",
        "include/peer.h": "int a(void);\nint b(void);\n",
        "src/a.c": '#include <libdrm/drm.h>\n#include "peer.h"\nint a(void) { return 40; }\n',
        "src/b.c": '#include <drm/rocket_accel.h>\n#include "peer.h"\nint b(void) { return 2; }\n',
        "tests/gate.c": '#include "peer.h"\nint main(void) { return a() + b() == 42 ? 0 : 1; }\n',
        "tests/data/teflon-dw-capture/out.bin": "board",
    }
    for name, text in files.items():
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / name).write_text(text)
    git = ["git", "-C", str(tree), "-c", "user.name=t", "-c", "user.email=t@example.org"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "gate"], check=True)
    commit, tree_id = subprocess.run(
        [*git, "rev-parse", "HEAD", "HEAD^{tree}"], capture_output=True, text=True, check=True
    ).stdout.split()
    pool = tmp_path / "archive" / "pool/main/p"
    pool.mkdir(parents=True)
    headers = []
    for package, header in (
        ("libdrm-dev", "libdrm/drm.h"),
        ("linux-libc-dev", "drm/rocket_accel.h"),
    ):
        staged = tmp_path / package
        (staged / "DEBIAN").mkdir(parents=True)
        (staged / "DEBIAN" / "control").write_text(
            f"Package: {package}\nVersion: 1\nArchitecture: all\nMaintainer: t <t@example.org>\n"
            "Description: headers\n"
        )
        (staged / "usr/include" / header).parent.mkdir(parents=True)
        (staged / "usr/include" / header).write_text("#define PEER_HEADER 1\n")
        deb = pool / f"{package}_1_all.deb"
        subprocess.run(["dpkg-deb", "-b", staged, deb], capture_output=True, check=True)
        digest = hashlib.sha256(deb.read_bytes()).hexdigest()
        headers.append(
            {
                "package": package,
                "version": "1",
                "file": f"pool/main/p/{deb.name}",
                "sha256": digest,
            }
        )
    pinned = {
        **PEER,
        "commit": commit,
        "tree_id": tree_id,
        "headers": headers,
        "gates": [{"name": "gate", "description": "a gate", "expect": "pass"}],
    }
    return tree, tmp_path / "archive", pinned


def test_the_peer_s_gates_are_built_for_arm64_from_the_pinned_tree(tmp_path, monkeypatch):
    """The peer's library, as its CMakeLists lists it, and each gate are built for arm64
    against the pinned Debian headers, statically; a tree that is not the pinned one leaves
    nothing built."""
    from rocket_emu.errors import EmulationError
    from rocket_emu.pins import Pins

    for tool in (peer_suite.COMPILER, "dpkg-deb", "git"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed: make deps installs it")
    tree, archive, pinned = _fake_peer(tmp_path)
    monkeypatch.setenv("AIPU_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("DEBIAN_MIRROR", archive.as_uri())
    pins = Pins({**PINS.data, "peer_suite": pinned})
    assert peer_suite.build(pins, None) is None  # neither cached nor given: left out
    built = peer_suite.build(pins, tree)
    assert built == peer_suite.cached(pins)
    assert json.loads((built / "gates.json").read_text()) == [
        {"name": "gate", "program": "bin/gate"}
    ]
    assert (built / "teflon-dw-capture" / "out.bin").read_text() == "board"
    program = (built / "bin" / "gate").read_bytes()
    assert program[:4] == b"\x7fELF" and int.from_bytes(program[18:20], "little") == 183  # arm64
    assert PT_INTERP not in elf_segment_types(program)  # static: no dynamic loader to ask for
    if shutil.which("qemu-aarch64"):
        assert (
            subprocess.run([shutil.which("qemu-aarch64"), built / "bin" / "gate"]).returncode == 0
        )

    wrong = Pins({**PINS.data, "peer_suite": {**pinned, "tree_id": "0" * 40}})
    with pytest.raises(EmulationError, match=r"has no commit .* with tree 0000"):
        peer_suite.build(wrong, tree)
    assert peer_suite.cached(wrong) is None


def _operation_tensors(model: Path) -> list[tuple]:
    """The first operation's input, weights, bias and output: shape, quantization, data."""
    from npuctl.platforms.rocket.litert import interpreter

    loaded = interpreter(model, None)
    details = {tensor["index"]: tensor for tensor in loaded.get_tensor_details()}
    operation = loaded._get_ops_details()[0]
    found = []
    for position, index in enumerate([*operation["inputs"], *operation["outputs"]]):
        tensor = details[index]
        data = loaded.get_tensor(index).tobytes() if position in (1, 2) else b""
        found.append((tensor["shape"].tolist(), tensor["quantization"], data))
    return [operation["op_name"], *found]


def test_frigate_keeps_what_its_thresholds_let_through():
    """Frigate's view of a detector's rows: below 0.4 dropped, counted from 0.5, a true
    positive from 0.7; two answers are the same objects when class, what each reaches and
    box agree, whatever the order the rows came in."""
    cpu = [[0, 0.75, 0.1, 0.1, 0.9, 0.6], [17, 0.55, 0.2, 0.2, 0.4, 0.4], [5, 0.3, 0, 0, 1, 1]]
    view = frigate_view(cpu)
    assert [(d["class"], d["counted"], d["true_positive"]) for d in view] == [
        (0, True, True),
        (17, True, False),
    ]
    assert frigate_comparison(list(reversed(cpu)), cpu)["same"]
    # a row Frigate keeps but does not count (0.4 to 0.5) on one side only: the same objects
    assert frigate_comparison([*cpu, [0, 0.45, 0, 0, 0.5, 0.5]], cpu)["same"]
    lower = [[0, 0.69, 0.1, 0.1, 0.9, 0.6], *cpu[1:]]  # no longer a true positive
    assert not frigate_comparison(lower, cpu)["same"]
    moved = [[0, 0.75, 0.3, 0.1, 1.0, 0.6], *cpu[1:]]
    compared = frigate_comparison(moved, cpu)
    assert not compared["same"] and compared["largest_score_difference"] == 0


@pytest.mark.parametrize("number", ["086", "087"])
def test_mesas_operation_files_are_the_published_files_operations_by_number(tmp_path, number):
    """Mesa's own file of Models.Op/mobiledet_<NNN> is operation NNN of the published file as
    tools/testkit/tflite_cut.py numbers and cuts it: the same kind, shapes, quantization,
    weights and bias."""
    if not MESA_TESTS.is_dir():
        pytest.skip(sources.NOT_MESA_TESTS)
    whole = MESA_TESTS / "ssdlite_mobiledet_coco_qat_postprocess.tflite"
    ours = cut(whole, int(number), tmp_path / f"cut-{number}.tflite")
    assert _operation_tensors(ours) == _operation_tensors(MESA_TESTS / f"mobiledet-{number}.tflite")


def _debs_under_test(request, tmp_path_factory) -> Path:
    """dist/ under 'make check-rocket-emu'; otherwise this session's rocket-dkms and npuctl
    .debs (the fixtures other tests share), in a folder of their own."""
    if FULL:
        return DIST
    dist = tmp_path_factory.mktemp("debs")
    built = [
        *request.getfixturevalue("rocket_packages").values(),
        *request.getfixturevalue("npuctl_debs").values(),
    ]
    for path in built:
        if path.suffix == ".deb":
            shutil.copyfile(path, dist / path.name)
    return dist


def start_beside_the_tests(request, cancel: threading.Event) -> Callable[[], board.Run]:
    """The boot keeps one core busy for minutes (QEMU's emulation thread): it starts with
    the session and runs beside the other tests. Here, in the session's thread: whether it
    can run, and the .debs under test; the thread builds the cases and boots."""
    tmp_path_factory = request.getfixturevalue("tmp_path_factory")
    if os.geteuid() != 0:
        pytest.skip("the emulated board's build needs root (mmdebstrap, binfmt)")
    reason = missing_from_cache(None)
    dist = _debs_under_test(request, tmp_path_factory) if reason is None else DIST
    reason = reason or missing_from_cache(dist)
    if reason is not None:
        if FULL:
            pytest.fail(f"'python -m rocket_emu prepare' has not run: {reason}")
        pytest.skip(reason)
    emulator = sources.cache() / f"emulator-{PINS.emulator['tree_id']}"
    qemu = qemu_build.cached_binary(PINS, emulator)
    guest = guest_root.GuestRoot(sources.cache() / f"guest-{guest_root.cache_key(PINS, dist)}")
    at_boot = guest_root.debs_installed_at_boot(PINS, dist)
    teflons = [board.Teflon(FIRST_TEFLON)] + [
        board.Teflon(teflon["version"], tuple(sources.teflon_debs(teflon)))
        for teflon in PINS.teflons[1:]
    ]
    cases = tmp_path_factory.mktemp("cases")
    # The caches' folders are found here, before any test runs: a test that points the cache
    # elsewhere (AIPU_CACHE) for a while must not move them under the boot's thread.
    found = Cached(sources.frigate_cache(PINS), peer_suite.cached(PINS))
    return lambda: _boot(qemu, guest, cases, found, at_boot, teflons, cancel)


def _build_case(name: str, folder: Path) -> Path:
    """The case's model, built as the board gets it (the builders are deterministic); a
    published file, whole or one operation cut out alone, from the cache."""
    published = CASES[name].get("published")
    if published is not None:
        source = _published_file(name)
        if published["operation"] == "whole":
            return Path(shutil.copyfile(source, folder / f"{name}.tflite"))
        return cut(source, int(published["operation"]), folder / f"{name}.tflite")
    if name in DETECTORS:
        return DETECTORS[name](folder / f"{name}.tflite")
    return conv_stack(folder / f"{name}.tflite", **BUILDERS[name], description=name)


@dataclass(frozen=True)
class Cached:
    """The caches the board's cases are written from."""

    frigate: Path
    peer: Path | None


def _write_cases(cases: Path, found: Cached) -> Path:
    """The golden cases (cases.json) and the served models; the models' folder."""
    listed = []
    for name in CASES:
        if _not_cached(name):
            continue  # said by each of its tests
        _build_case(name, cases)
        listed.append({"name": name, "file": f"{name}.tflite"})
        picture = CASES[name].get("picture")
        if picture is not None:  # one of the published files (the doctor's photograph)
            shutil.copyfile(PUBLISHED / picture, cases / picture)
            listed[-1]["picture"] = picture
    (cases / "cases.json").write_text(json.dumps(listed))
    models = cases / "models"
    models.mkdir()
    conv_stack(models / SERVED_MODEL, **BUILDERS["mobilenet-v1-classifier"])
    (models / LABELS).write_text("".join(f"class {n}\n" for n in range(1001)))
    DETECTORS[SERVED_DETECTOR_CASE](models / SERVED_DETECTOR)
    if PUBLISHED.is_dir():  # the doctor's golden checks run on it (models.yaml: golden-photo)
        shutil.copyfile(PUBLISHED / GOLDEN_PHOTO, models / GOLDEN_PHOTO)
    # MobileNetV2 at its published addition scales: Mesa 26.1 adds them wrongly.
    conv_stack(models / SERVED_V2, **BUILDERS[SERVED_V2_CASE])
    shutil.copytree(found.frigate, cases / "frigate")  # Frigate's own code
    if found.peer is not None:  # the board runs them before the Teflons' cases
        shutil.copytree(found.peer, cases / "peer")
        listed = []
        for name, capture in CAPTURES.items():
            tensor, _ = _capture_tensors(capture, found.peer)
            np.save(cases / f"capture-{name}.npy", tensor)
            model = f"peer/{capture['folder']}/{capture['model']}"
            listed.append({"name": name, "model": model, "input": f"capture-{name}.npy"})
        (cases / "captures.json").write_text(json.dumps(listed))
    return models


def _capture_tensors(capture: dict, folder: Path | None = None) -> tuple[np.ndarray, np.ndarray]:
    """A real board's capture: the input it was given and the output it computed."""
    folder = folder or peer_suite.cached(PINS)
    assert folder is not None
    return captures.load(folder / capture["folder"], capture, tuple(capture["shape"]))


def _boot(
    qemu: Path,
    guest: guest_root.GuestRoot,
    cases: Path,
    found: Cached,
    at_boot: list[Path],
    teflons: list[board.Teflon],
    cancel: threading.Event,
) -> board.Run:
    models = _write_cases(cases, found)
    v2_tensor = np.random.default_rng(9).integers(0, 256, (1, 224, 224, 3), dtype=np.uint8)
    v2_cpu = cpu_scores(models / SERVED_V2, v2_tensor)
    picture = cases / "picture.jpg"
    pixels = np.random.default_rng(5).integers(0, 256, (240, 320, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(picture, quality=95)
    scene = cases / "scene.jpg"  # large enough that a pixel is a small part of a box
    pixels = np.random.default_rng(6).integers(0, 256, (480, 640, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(scene, quality=95)
    cpu_answer = cpu_detections(models / SERVED_DETECTOR, scene)
    # Frigate's frame: the scene at the detector's input size, as Frigate resizes a region.
    frame = cases / "frame.png"
    Image.open(scene).resize((320, 320), Image.BILINEAR).save(frame)
    frame_cpu = cpu_detections(models / SERVED_DETECTOR, frame)
    # The same frame as Frigate's teflon_tfl detector gets it on the board, and its answer.
    np.save(cases / "frame.npy", np.asarray(Image.open(frame).convert("RGB"))[None])
    (cases / "frame-cpu.json").write_text(json.dumps(frame_cpu))

    def detect(port: int) -> dict:
        """Frigate's DeepStack detector's request: the frame as a multipart form."""
        result = subprocess.run(
            [
                "curl", "-sS", "--fail-with-body", "--max-time", "600",
                f"http://127.0.0.1:{port}/v1/vision/detection", "-F", f"image=@{scene}",
            ],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        return {"exit": result.returncode, "body": result.stdout, "cpu": cpu_answer}

    def classify(port: int) -> dict:
        """A DeepStack client's request (curl, a multipart form) on the forwarded port."""
        result = subprocess.run(
            [
                "curl", "-sS", "--fail-with-body", "--max-time", "600",
                f"http://127.0.0.1:{port}/v1/vision/classification",
                "-F", f"image=@{picture}", "-F", "top_k=3",
            ],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        return {
            "exit": result.returncode,
            "body": result.stdout,
            "stderr": result.stderr,
        }

    def infer(port: int, tensor: np.ndarray, model: str = "mobilenet") -> dict:
        """A Triton client's request: the input tensor as binary data, the output as JSON.
        No decode or resize on the board: the NPU's share of a request is the largest."""
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        meta = json.loads(_get(connection, f"/v2/models/{model}"))["inputs"][0]
        header = json.dumps(
            {
                "inputs": [
                    {
                        "name": meta["name"],
                        "shape": meta["shape"],
                        "datatype": meta["datatype"],
                        "parameters": {"binary_data_size": tensor.nbytes},
                    }
                ]
            }
        ).encode()
        connection.request(
            "POST",
            f"/v2/models/{model}/infer",
            body=header + tensor.tobytes(),
            headers={"Inference-Header-Content-Length": str(len(header))},
        )
        response = connection.getresponse()
        answer = {"status": response.status, "body": response.read().decode()}
        connection.close()
        return answer

    def served_on_every_core(ports: board.Forwarded) -> dict:
        """A DeepStack request alone, Frigate's zmq frame, then CONCURRENT Triton clients at
        once, each sending the same tensor in turn: the server's three NPU owners take them
        side by side."""
        port = ports.http
        first = classify(port)
        detected = detect(port)
        zmq_frame = frigate_request(ports.zmq, frame, frame_cpu)
        second = infer(port, v2_tensor, "mobilenet-v2")
        tensor = np.random.default_rng(7).integers(0, 256, (1, 224, 224, 3), dtype=np.uint8)
        alone = [infer(port, tensor) for _ in range(CONCURRENT)]
        with ThreadPoolExecutor(CONCURRENT) as clients:
            answers = list(clients.map(lambda _: infer(port, tensor), range(CONCURRENT * 4)))
        return {
            "classify": first,
            "detect": detected,
            "frigate": zmq_frame,
            "mobilenet-v2": {**second, "cpu": v2_cpu},
            "alone": alone,
            "infer": answers,
        }

    run = board.boot(
        PINS,
        qemu,
        guest,
        cases,
        at_boot,
        teflons,
        WORK,
        served_on_every_core,
        cancelled=cancel,
    )
    run.host["frame_cpu"] = frame_cpu
    _report(run, qemu, guest)
    return run


@pytest.fixture(scope="module")
def emulated(request) -> board.Run:
    run = started_beside(request)
    print(f"\nemulated board: one boot {run.seconds} s; console: {WORK / 'console.log'}")
    return run


@pytest.fixture(scope="module")
def case_jobs(emulated) -> dict[tuple[str, str], list[registers.Job]]:
    """Each case's jobs under each Teflon from the NPU model's log, read once (it is tens of
    megabytes)."""
    return _case_jobs(emulated, registers.read_log(emulated.regcmd_log))


def _report(run: board.Run, qemu: Path, guest: guest_root.GuestRoot) -> None:
    """dist/rocket-emu.json: what the cached parts took to build, this boot's time and, under
    each Teflon, the doctor's golden checks and each case's verdict and registers (their
    listings in dist/rocket-emu-registers/); docs/emulated-board-results.md is generated
    from it."""
    install = run.first("install") or {}
    serve = run.first("serve") or {}
    outputs = _served_outputs(run.served or {})
    doctor = _doctor_checks(run, SERVED_TEFLON)
    jobs = registers.read_log(run.regcmd_log) if run.regcmd_log and run.regcmd_log.exists() else []
    case_jobs = _case_jobs(run, jobs)
    report = {
        "schema": REPORT_SCHEMA,
        "generated": datetime.now(UTC).isoformat(timespec="seconds"),
        "kernel": PINS.release,
        "qemu_build_seconds": qemu_build.build_seconds(qemu),
        "guest_build_seconds": guest.facts.get("build_seconds"),
        "boot_seconds": run.seconds,
        "install_seconds": install.get("seconds"),
        "phases": board.phases(run.marks, run.seconds),
        "teflons": {teflon: _teflon_report(run, teflon, case_jobs) for teflon in TEFLONS},
        "register_differences": {
            name: registers.differences(
                case_jobs[FIRST_TEFLON, name], case_jobs[SERVED_TEFLON, name]
            )
            for name in CASES
            if (FIRST_TEFLON, name) in case_jobs and (SERVED_TEFLON, name) in case_jobs
        },
        "served": {
            "teflon": SERVED_TEFLON,
            "model": SERVED_MODEL,
            "golden": doctor.get("golden", {}).get("summary"),
            "answers": len(outputs),
            "largest_difference": _largest_difference(outputs),
            "core_jobs": _core_jobs(serve),
        },
        "mobilenet_v2": {
            "model": SERVED_V2,
            "case": SERVED_V2_CASE,
            "golden": doctor.get("golden.mobilenet-v2", {}).get("summary"),
            "served": v2_verdict((run.served or {}).get("mobilenet-v2")),
        },
        "detector": {
            "model": SERVED_DETECTOR,
            "case": SERVED_DETECTOR_CASE,
            "golden": doctor.get("golden.ssdlite", {}).get("summary"),
            "served": detection_verdict((run.served or {}).get("detect")),
            "frigate_zmq": frigate_verdict((run.served or {}).get("frigate")),
        },
    }
    report["hardware"] = _hardware_report(run)
    report["photographs"] = _photograph_report(run)
    report["peer_suite"] = _peer_report(run)
    report["pad_lanes"] = _pad_lanes_report()
    shutil.rmtree(REGISTER_LISTINGS, ignore_errors=True)
    for (teflon, name), found in case_jobs.items():
        listing = REGISTER_LISTINGS / teflon / f"{name}.txt"
        listing.parent.mkdir(parents=True, exist_ok=True)
        listing.write_text(registers.listing(found), encoding="utf-8")
    write_atomically(DIST / "rocket-emu.json", json.dumps(report, indent=1) + "\n")


def peer_verdict(found: dict | None) -> str:
    """A peer gate's verdict by its exit: 0 pass, 2 skip (it found no NPU), any other exit
    fail (the gates end in 1 or -1 on a mismatch); or how it ended otherwise."""
    if found is None:
        return "not run"
    code = found["exit"]
    if code == -1:  # the board's child() on a timeout
        return "timed out"
    if code < 0:
        return f"killed by signal {-code}"
    return {0: "pass", 2: "skip"}.get(code, "fail")


def peer_findings(lines: list[str]) -> list[str]:
    """The lines a gate judges by (its PASS, FAIL, mismatch and difference lines)."""
    marks = ("PASS", "FAIL", "MISMATCH", "mismatch", "max_abs", "maxd", "SKIP", "DIAGNOSTIC")
    return [line.strip() for line in lines if any(mark in line for mark in marks)]


def _peer_report(run: board.Run) -> dict:
    """The peer's gates on the board: each one's verdict, its expectation and the lines it
    judged by; how many passed (bit-exact, each against its own model of the part or, for
    replay_dw_mesa, against what a real board computed)."""
    ran = {found["name"]: found for found in run.all("peer-gate")}
    gates = []
    for name, gate in PEER_GATES.items():
        found = ran.get(name)
        gates.append(
            {
                "name": name,
                "description": gate["description"],
                "expect": gate["expect"],
                "verdict": peer_verdict(found),
                "seconds": found and found["seconds"],
                "findings": peer_findings(found["lines"]) if found else [],
            }
        )
    board_captures = []
    for name, capture in CAPTURES.items():
        if peer_suite.cached(PINS) is None:
            break
        board_output = _capture_tensors(capture)[1]
        found = {
            found["teflon"]: found for found in run.all("board-capture") if found["name"] == name
        }
        board_captures.append(
            {
                "name": name,
                "description": capture["description"],
                "teflons": {
                    teflon: {
                        "expect": capture["expect"][teflon],
                        **capture_verdict(found.get(teflon), board_output),
                    }
                    for teflon in TEFLONS
                },
            }
        )
    return {
        "repository": PEER["repository"],
        "commit": PEER["commit"],
        "ran": bool(ran),
        "passed": sum(gate["verdict"] == "pass" for gate in gates),
        "gates": gates,
        "captures": board_captures,
    }


def _pad_lanes_report() -> dict | None:
    """Each reading of CNA_PAD_CON1's second byte on every padded convolution of Mesa's
    published test models that has two bytes to tell apart, with the boards' verdict on the
    operation under each release (tools/rocket_emu/pad_lanes.py)."""
    if not MESA_TESTS.is_dir():
        return None
    from npuctl.platforms.rocket.litert import interpreter

    found = evidence()
    models = []
    with tempfile.TemporaryDirectory() as work:
        for model, file in pad_lanes.MESA_MODELS.items():
            rows = []
            for prediction in pad_lanes.predict(MESA_TESTS / file, Path(work), interpreter):
                boards = {
                    f"{major}.{minor}": release.models[model].verdict(prediction.operation)
                    for (major, minor), release in sorted(found.releases.items())
                }
                rows.append({**prediction.to_json(), "boards": boards})
            models.append({"model": model, "file": file, "operations": rows})
    return {
        "readings": list(pad_lanes.READINGS),
        "modelled": pad_lanes.MODELLED,
        "tolerance": pad_lanes.TOLERANCE,
        "models": models,
    }


def _hardware_report(run: board.Run) -> dict:
    """The cases that stand for Mesa's tests: each with the test, what it runs (a published
    operation by its shapes and scales), and per Teflon the boards' verdict (hardware.yaml),
    this run's by the same method, and the blind spots named where they part."""
    found = evidence()
    rows = []
    for name in HARDWARE_CASES:
        case, reference = CASES[name], CASES[name]["hardware"]
        published = case.get("published")
        runs = case["description"]
        operation = _published_operation(name)
        if operation is not None:
            runs = operation.describe()
        verdicts = {}
        for teflon in TEFLONS:
            release = found.of(teflon)
            assert release is not None, teflon
            model = release.models[reference["model"]]
            ran = [c for c in run.under("case", teflon) if c["name"] == name]
            golden = ran[0]["golden"] if ran else None
            verdicts[teflon] = {
                "boards": model.verdict(reference["operation"]),
                "emulated": None
                if not golden or not golden.get("ok")
                else ("pass" if _passed(name, golden) else "fail"),
                # Mesa's measure: the largest element difference, in quantized steps
                "difference": (golden or {}).get("max_difference") if published else None,
                "blind_spots": case.get("blind_spots", {}).get(teflon, []),
            }
        rows.append(
            {
                "case": name,
                "test": found.releases[max(found.releases)]
                .models[reference["model"]]
                .test(reference["operation"]),
                "runs": runs,
                "lookalike": published is None,
                "teflons": verdicts,
            }
        )
    return {"tolerance": found.tolerance, "rows": rows}


# What Frigate keeps of a detector's answer for one frame: rows from its detector's own
# threshold (0.4), an object counted from min_score and a true positive from threshold
# (frigate/config/camera/objects.py: its defaults).
FRIGATE_ROWS, FRIGATE_MIN_SCORE, FRIGATE_THRESHOLD = 0.4, 0.5, 0.7


def frigate_view(rows: list[list[float]]) -> list[dict]:
    """A detector's rows [class, score, box] as Frigate keeps them for one frame, best
    first, with what each reaches."""
    kept = sorted((row for row in rows if row[1] >= FRIGATE_ROWS), key=lambda row: -row[1])
    return [
        {
            "class": int(row[0]),
            "score": row[1],
            "box": row[2:],
            "counted": row[1] >= FRIGATE_MIN_SCORE,
            "true_positive": row[1] >= FRIGATE_THRESHOLD,
        }
        for row in kept
    ]


def frigate_comparison(npu: list[list[float]], cpu: list[list[float]]) -> dict:
    """The NPU's rows against the CPU's as Frigate keeps them: each side's kept detections,
    and whether the objects Frigate counts (from min_score) are the same (class, whether a
    true positive, box IoU at least 0.9), with their largest score difference."""
    from npuctl.platforms.rocket.golden import iou

    sides = {"npu": frigate_view(npu), "cpu": frigate_view(cpu)}
    counted = [[found for found in side if found["counted"]] for side in sides.values()]
    same = len(counted[0]) == len(counted[1]) and all(
        a["class"] == b["class"]
        and a["true_positive"] == b["true_positive"]
        and iou(a["box"], b["box"]) >= 0.9
        for a, b in zip(*counted, strict=False)
    )
    scores = [abs(a["score"] - b["score"]) for a, b in zip(*counted, strict=False)]
    return {**sides, "same": same, "largest_score_difference": round(max(scores, default=0), 4)}


def _photograph_report(run: board.Run) -> list[dict]:
    """Each case run on a photograph, per Teflon: npuctl's verdict, and the detections as
    Frigate keeps them on the NPU and on the CPU."""
    rows = []
    for name, case in CASES.items():
        if "picture" not in case:
            continue
        teflons = {}
        for teflon in TEFLONS:
            ran = [c for c in run.under("case", teflon) if c["name"] == name]
            golden = (ran[0]["golden"] if ran else None) or {}
            found = golden.get("detections")
            teflons[teflon] = {
                "verdict": golden.get("verdict") or golden.get("error"),
                "passed": golden.get("passed"),
                "frigate": None if not found else frigate_comparison(found["npu"], found["cpu"]),
            }
        rows.append({"case": name, "picture": case["picture"], "teflons": teflons})
    return rows


def _published_operation(name: str) -> Operation | None:
    """The one operation a published case that stands for Mesa's Models.Op/<model>_<NNN>
    runs, read from the file (its shapes and scales): cut out of the whole file by its
    number, or Mesa's own file of it; None for a whole model, or where not cached."""
    case = CASES[name]
    published = case.get("published")
    if published is None or case["hardware"]["operation"] == "whole" or _not_cached(name):
        return None
    found = delegated(_published_file(name))
    if published["operation"] != "whole":
        return next(o for o in found if o.index == int(published["operation"]))
    (operation,) = found  # Mesa's file of one operation
    return operation


def _doctor_checks(run: board.Run, teflon: str) -> dict[str, dict]:
    """npuctl doctor's findings by id, as it reported them under that Teflon."""
    doctors = run.under("doctor", teflon)
    report = (doctors[0].get("report") or {}) if doctors else {}
    return {finding["id"]: finding for finding in report.get("checks", [])}


def _case_jobs(run: board.Run, jobs: list[registers.Job]) -> dict[tuple[str, str], list]:
    """Each case's NPU jobs under each Teflon, by (Teflon, case): the ones numbered between
    the board's job counts before and after the case."""
    before = (run.first("interrupts-before-jobs") or {}).get("count", 0)
    found = {}
    for case in run.all("case"):
        counted = case.get("jobs")
        if isinstance(counted, list) and len(counted) == 2:
            first, end = (count - before for count in counted)
            found[(case["teflon"], case["name"])] = registers.between(jobs, first, end)
    return found


def _teflon_report(run: board.Run, teflon: str, case_jobs: dict) -> dict:
    host_seconds = board.case_seconds(run.marks)
    switched = next(iter(run.under("teflon", teflon)), None)
    doctor = _doctor_checks(run, teflon)
    return {
        "installed": None if switched is None else {
            "exit": switched["exit"], "version": switched["installed"],
            "seconds": switched["seconds"],
        },
        "frigate_teflon": _frigate_teflon_verdict(run, teflon),
        "doctor": {
            finding_id: doctor[finding_id]["summary"]
            for finding_id in ("teflon.installed", "teflon.version", "golden",
                               "golden.mobilenet-v2", "golden.ssdlite")
            if finding_id in doctor
        },
        "cases": {
            case["name"]: {
                "expect": PINS.expectation(CASES[case["name"]], teflon),
                "golden": case["golden"],
                "seconds": case["seconds"],
                "host_seconds": host_seconds.get((teflon, case["name"])),
                "registers": _registers_summary(case_jobs.get((teflon, case["name"]))),
            }
            for case in run.under("case", teflon)
            if case["name"] in CASES
        },
    }  # fmt: skip


def _frigate_teflon_verdict(run: board.Run, teflon: str) -> dict:
    """Frigate's teflon_tfl detector on the board under that Teflon against the CPU's
    detections of the same frame."""
    found = run.under("frigate-teflon", teflon)
    if not found or found[0]["rows"] is None:
        return {"passed": False, "verdict": f"no rows: {found[0] if found else 'not run'}"}
    answer = {"ready": True, "rows": found[0]["rows"], "cpu": run.host.get("frame_cpu", [])}
    return frigate_verdict(answer)


def _registers_summary(jobs: list[registers.Job] | None) -> dict | None:
    if jobs is None:
        return None
    return {
        "jobs": len(jobs),
        "tasks": sum(len(job.tasks) for job in jobs),
        "digest": registers.digest(jobs),
    }


def frigate_request(port: int, frame: Path, cpu: list[dict]) -> dict:
    """Frigate's zmq detector's model request and one frame (uint8, NHWC), with pyzmq as
    Frigate does it; the CPU's detections of the same frame beside."""
    from testkit.frigate_client import FrigateZmqClient

    client = FrigateZmqClient(
        f"tcp://127.0.0.1:{port}", "/config/ssdlite_mobiledet.tflite", "ssd", 600_000
    )
    try:
        pixels = np.asarray(Image.open(frame).convert("RGB"))[None]
        rows = client.detect_raw(pixels) if client.model_ready else None
    finally:
        client.close()
    return {
        "ready": client.model_ready,
        "logged": client.logged,
        "rows": None if rows is None else rows.tolist(),
        "cpu": cpu,
    }


def cpu_scores(model: Path, tensor: np.ndarray) -> list[int]:
    """The classifier's scores for the tensor from the CPU interpreter."""
    from npuctl.platforms.rocket.litert import interpreter

    loaded = interpreter(model, None)
    loaded.set_tensor(loaded.get_input_details()[0]["index"], tensor)
    loaded.invoke()
    return loaded.get_tensor(loaded.get_output_details()[0]["index"]).reshape(-1).tolist()


def cpu_detections(model: Path, scene: Path) -> list[dict]:
    """The DeepStack answer's predictions for the scene with the model on the CPU, through
    the same steps npuctl serve takes (decode, resize, the interpreter, the reply)."""
    from npuctl.images import decode_rgb
    from npuctl.platforms.rocket import detect
    from npuctl.serve.protocols.deepstack import DEFAULT_MIN_CONFIDENCE, detection_reply

    picture = decode_rgb(scene.read_bytes(), 50_000_000)
    found = detect.SsdModel(model, None)
    outputs, _ = found.run_all([detect.prepare(picture, found.input)])
    detections = detect.detections(
        outputs,
        found.order,
        picture.size,
        detect.read_labels(None),
        DEFAULT_MIN_CONFIDENCE,
    )
    return json.loads(detection_reply(detections, picture.size, 20, 0.0))["predictions"]


def detection_verdict(answer: dict | None) -> dict:
    """The board's DeepStack answer against the CPU's: every prediction paired in order,
    same label, confidence within 0.02, the boxes' IoU at least 0.9."""
    if not answer or answer.get("exit") != 0:
        return {"passed": False, "verdict": f"no answer: {answer}"}
    served, cpu = json.loads(answer["body"])["predictions"], answer["cpu"]
    if len(served) != len(cpu) or not cpu:
        return {
            "passed": False,
            "verdict": f"{len(served)} detections, {len(cpu)} on the CPU",
        }
    labels = all(a["label"] == b["label"] for a, b in zip(served, cpu, strict=True))
    score = max(abs(a["confidence"] - b["confidence"]) for a, b in zip(served, cpu, strict=True))
    from npuctl.platforms.rocket.golden import iou as overlap

    iou = min(overlap(*(_corners(d) for d in pair)) for pair in zip(served, cpu, strict=True))
    return {
        "passed": labels and score <= 0.02 and iou >= 0.9,
        "verdict": f"{len(cpu)} detections as on the CPU: labels "
        f"{'the same' if labels else 'differ'}, smallest IoU {iou:.2f}, largest confidence "
        f"difference {score:.3f}",
        "label": cpu[0]["label"],
    }


def frigate_verdict(answer: dict | None) -> dict:
    """The board's answer to Frigate's zmq frame against the CPU's detections of the same
    frame: the same rows in order (class, score within 0.02), each box's IoU at least 0.9."""
    if not answer or not answer.get("ready") or answer.get("rows") is None:
        return {"passed": False, "verdict": f"no answer: {answer}"}
    rows = [row for row in answer["rows"] if row[1] > 0]
    cpu = answer["cpu"]
    if len(rows) != len(cpu) or not cpu:
        return {
            "passed": False,
            "verdict": f"{len(rows)} rows, {len(cpu)} detections on the CPU",
        }
    from npuctl.platforms.rocket.detect import read_labels
    from npuctl.platforms.rocket.golden import iou as overlap

    labels = read_labels(None)
    same = all(labels[int(row[0])] == d["label"] for row, d in zip(rows, cpu, strict=True))
    score = max(abs(row[1] - d["confidence"]) for row, d in zip(rows, cpu, strict=True))
    # Frigate maps a row's box onto the frame clipped to it (frigate/video/detect.py: detect),
    # as the server's rows already are and TFLite's own outputs are not.
    iou = min(
        overlap(tuple(min(max(v, 0.0), 1.0) * 320 for v in row[2:]), _corners(d))
        for row, d in zip(rows, cpu, strict=True)
    )
    return {
        "passed": same and score <= 0.02 and iou >= 0.9,
        "verdict": f"{len(cpu)} rows as the CPU's detections: classes "
        f"{'the same' if same else 'differ'}, smallest IoU {iou:.2f}, largest score "
        f"difference {score:.3f}",
    }


def _corners(prediction: dict) -> tuple[int, int, int, int]:
    """A DeepStack box in the post-processing op's order (y_min, x_min, y_max, x_max)."""
    return (
        prediction["y_min"],
        prediction["x_min"],
        prediction["y_max"],
        prediction["x_max"],
    )


def _served_outputs(served: dict) -> list[list[int]]:
    """The output tensor of every answered request, the ones sent alone first."""
    return [
        json.loads(answer["body"])["outputs"][0]["data"]
        for answer in [*served.get("alone", []), *served.get("infer", [])]
        if answer.get("status") == 200
    ]


def _core_jobs(serve: dict) -> dict[str, int]:
    """Jobs each core ran while npuctl serve answered (its interrupts, one a job)."""
    return {
        core: sum(count for line, count in serve.get("core_jobs", {}).items() if core in line)
        for core in CORES
    }


def _largest_difference(outputs: list[list[int]]) -> int | None:
    """The largest element difference between any answer and the first."""
    if not outputs:
        return None
    first = np.array(outputs[0])
    return int(max(np.abs(np.array(output) - first).max() for output in outputs))


def _differences(outputs: list[list[int]]) -> str:
    """Each answer against the first, in order: its top class and largest difference."""
    first = np.array(outputs[0])
    return "; ".join(
        f"{index}: top {int(np.argmax(output))}, "
        f"difference {int(np.abs(np.array(output) - first).max())}"
        for index, output in enumerate(outputs)
    )


def _get(connection: http.client.HTTPConnection, path: str) -> str:
    connection.request("GET", path)
    response = connection.getresponse()
    return response.read().decode()


def _finding(run: board.Run, finding_id: str, teflon: str = FIRST_TEFLON) -> dict:
    doctors = run.under("doctor", teflon)
    assert doctors and doctors[0]["report"], f"npuctl doctor gave no report under {teflon}"
    checks = doctors[0]["report"]["checks"]
    found = [check for check in checks if check["id"] == finding_id]
    assert found, f"no finding {finding_id}: {[check['id'] for check in checks]}"
    return found[0]


def test_the_backports_kernel_boots_and_rocket_probes_the_three_cores(emulated):
    assert f"LAB: booted {PINS.release}" in emulated.console
    probed = re.findall(r"rocket (\w+)\.\S+: Rockchip NPU core \d+ version", emulated.dmesg)
    assert sorted(probed) == list(CORES), probed
    assert len(CORES) == PINS.data["machine"]["cores_enabled"]
    assert "LAB: accel node after" in emulated.console, "no /dev/accel/accel0"
    assert "NPU job timed out" not in emulated.dmesg
    assert not re.search(r"Oops|Kernel panic|BUG:", emulated.console)
    assert "LAB: done" in emulated.console


def test_the_board_runs_the_npuctl_debs_under_test(emulated):
    install = emulated.first("install")
    assert install is not None and install["exit"] == 0, install
    assert install["installed"] == emulated.debs_sent, install
    assert set(emulated.debs_sent) == set(PINS.guest["installed_at_boot"])


@pytest.mark.parametrize("teflon", TEFLONS[1:])
def test_each_later_teflon_installs_over_the_one_before(emulated, teflon):
    """dpkg installs the pinned .debs over the Teflon before, as an upgrade would, and the
    package's version is then the pin's."""
    (switched,) = emulated.under("teflon", teflon)
    assert switched["exit"] == 0, switched["output"]
    assert switched["installed"] == teflon, switched


def test_rocket_is_the_dkms_build_of_this_projects_package(emulated):
    dkms = _finding(emulated, "dkms.installed")
    assert dkms["status"] == "ok" and f"installed for {PINS.release}" in dkms["summary"]
    module = _finding(emulated, "module.file")
    assert module["status"] == "ok"
    assert f"/lib/modules/{PINS.release}/updates/dkms/rocket.ko" in module["summary"]


# What npuctl doctor must say on the emulated board, finding by finding: everything it
# checks is ok, the golden checks of the served models included, except what the Teflon
# installed computes wrongly, which it must name.
EXPECTED_FINDINGS = {
    # The machine's device tree enables the three cores, as the board's does.
    "platform.npu": ("ok", "3 NPU core nodes enabled", None),
    "vendor.rknpu": ("ok", "No vendor rknpu driver loaded", None),
    "kernel.headers": ("ok", f"Kernel {PINS.release} with its headers", None),
    "module.bound": ("ok", "Driver: rocket bound to", None),
    "cores.probed": ("ok", "3 NPU cores probed", None),
    "device.node": ("ok", "/dev/accel/accel0", None),
    "runtime.litert": ("ok", "TFLite runtime", None),
    "memory.iommu": ("ok", "Memory:", None),
    "delegate.probe": ("ok", "Teflon delegate loads", None),
    # The served MobileNet is the classifier case: the NPU computes what the CPU does.
    "golden": ("ok", "NPU and CPU agree: top-1", None),
    # The served detector: its own post-processing on the CPU, the same detections.
    "golden.ssdlite": ("ok", "ssdlite: NPU and CPU agree", None),
}
# Per Teflon: its version, what it is known to compute, and MobileNetV2 at its published
# addition scales, which Mesa 26.1 adds wrongly.
TEFLON_FINDINGS = {
    FIRST_TEFLON: {
        "teflon.installed": ("ok", f"Mesa Teflon {FIRST_TEFLON}", None),
        "teflon.version": ("warning", "residual additions", "npuctl provision --only teflon"),
        "golden.mobilenet-v2": ("failure", f"Mesa Teflon {FIRST_TEFLON}", None),
    },
    SERVED_TEFLON: {
        "teflon.installed": ("ok", f"Mesa Teflon {SERVED_TEFLON}", None),
        # Real boards compute the published SSDLite MobileDet wrongly under 26.2 too
        # (hardware.yaml): said, without an upgrade to offer.
        "teflon.version": ("info", "SSDLite MobileDet as published (086 and 087)", None),
        "golden.mobilenet-v2": ("ok", "mobilenet-v2: NPU and CPU agree", None),
    },
}


def _expected_findings(teflon: str) -> dict[str, tuple[str, str, str | None]]:
    return {**EXPECTED_FINDINGS, **TEFLON_FINDINGS.get(teflon, {})}


@pytest.mark.parametrize(
    ("teflon", "finding_id"),
    [(teflon, finding) for teflon in TEFLONS for finding in sorted(_expected_findings(teflon))],
)
def test_npuctl_doctor_on_the_board(emulated, teflon, finding_id):
    status, words, fix = _expected_findings(teflon)[finding_id]
    finding = _finding(emulated, finding_id, teflon)
    assert finding["status"] == status, finding
    assert words in finding["summary"] + " " + (finding.get("detail") or ""), finding
    if fix is not None:
        assert fix in (finding.get("fix") or ""), finding


def _passed(name: str, golden: dict) -> bool:
    """The golden check's verdict; on a published model Mesa's own: every element of every
    output within Mesa's tolerance of the CPU's (its tests compare nothing else; a float
    output's difference counted in Mesa's 1/33 steps)."""
    if "published" not in CASES[name] or golden.get("max_difference") is None:
        return bool(golden["passed"])
    if "picture" in CASES[name]:  # a photograph's detections: npuctl's own check
        return bool(golden["passed"])
    return float(golden["max_difference"]) <= MESA_TOLERANCE


@pytest.mark.parametrize("teflon", TEFLONS)
def test_the_doctor_checks_the_served_detector_on_a_photograph(emulated, teflon):
    """With the photograph downloaded (models.yaml: golden-photo), the doctor's golden check
    runs the served detector on it, not on a pattern, and says so."""
    if not PUBLISHED.is_dir():
        pytest.skip(NOT_PUBLISHED)
    finding = _finding(emulated, "golden.ssdlite", teflon)
    assert f"(on the photograph {GOLDEN_PHOTO})" in finding["summary"], finding


HARDWARE_CASES = [name for name, case in CASES.items() if "hardware" in case]
PHOTOGRAPH_CASES = [name for name, case in CASES.items() if "picture" in case]


@pytest.mark.parametrize(("teflon", "name"), [(t, n) for t in TEFLONS for n in PHOTOGRAPH_CASES])
def test_the_published_detector_on_the_photograph_as_frigate_keeps_it(emulated, teflon, name):
    """The published SSDLite MobileDet on the photograph: on the CPU Frigate counts what it
    shows (the case's class); the NPU's objects beside the CPU's as Frigate keeps them (in
    the report)."""
    golden = _case(emulated, name, teflon)["golden"]
    assert golden and golden.get("ok") and golden.get("detections"), golden
    compared = frigate_comparison(golden["detections"]["npu"], golden["detections"]["cpu"])
    print(
        f"\n{name} under Teflon {teflon}: the same objects as Frigate keeps them: "
        f"{compared['same']}; NPU {compared['npu']}; CPU {compared['cpu']}"
    )
    shown = CASES[name]["shows"]
    assert any(found["class"] == shown and found["counted"] for found in compared["cpu"])


@pytest.mark.parametrize(
    ("teflon", "name"), [(t, n) for t in TEFLONS for n in sorted(HARDWARE_CASES)]
)
def test_the_board_s_verdicts_answer_to_real_boards(emulated, teflon, name):
    """What this run computed for a case that stands for one of Mesa's tests agrees with
    what real boards compute under the same Teflon's release (hardware.yaml), or the case
    names the emulator's blind spots that explain why not (emulation/rk3588.yaml)."""
    golden = _case(emulated, name, teflon)["golden"]
    assert golden and golden.get("ok"), golden
    reference = CASES[name]["hardware"]
    release = evidence().of(teflon)
    assert release is not None, teflon
    board_passes = release.models[reference["model"]].verdict(reference["operation"]) == "pass"
    named = CASES[name].get("blind_spots", {}).get(teflon, [])
    agree = _passed(name, golden) == board_passes
    print(
        f"\n{name} under Teflon {teflon}: real boards {'pass' if board_passes else 'fail'}, "
        f"emulated {'pass' if _passed(name, golden) else 'fail'}"
        + (f" (blind spots: {', '.join(named)})" if named else "")
    )
    assert agree != bool(named), (name, teflon, golden["verdict"], named)


@pytest.mark.parametrize("name", sorted(PEER_GATES))
def test_the_peer_s_gates_on_the_board(emulated, name):
    """librocketnpu's own gates, which pass bit-exact on real RK3588 boards, run on the
    emulated board through the same driver: each ends in a verdict (never a skip: the NPU is
    there), the one emulation/rk3588.yaml expects, so that a change shows up."""
    if peer_suite.cached(PINS) is None:
        pytest.skip(NOT_PEER)
    found = [gate for gate in emulated.all("peer-gate") if gate["name"] == name]
    assert found, f"the guest did not run the peer's gate {name}"
    verdict = peer_verdict(found[0])
    print(f"\n{name}: {verdict}; " + "; ".join(peer_findings(found[0]["lines"])[-6:]))
    assert verdict in ("pass", "fail"), found[0]["lines"][-10:]
    assert verdict == PEER_GATES[name]["expect"], found[0]["lines"][-20:]


def capture_verdict(found: dict | None, board_output: np.ndarray) -> dict:
    """What the emulated board's NPU computed on a real board's input, against that board's
    output, element by element, with the CPU interpreter's beside it."""
    if found is None or not found.get("outputs"):
        return {"ran": False, "error": (found or {}).get("stderr", "not run")[-300:]}
    board_values = board_output.astype(int)
    result: dict[str, object] = {"ran": True, "elements": int(board_values.size)}
    for side in ("npu", "cpu"):
        found_values = np.asarray(found["outputs"][side]).reshape(board_values.shape)
        difference = np.abs(found_values - board_values)
        differs = difference[0] > 0  # H, W, C
        border = np.ones(differs.shape[:2], bool)
        border[1:-1, 1:-1] = False  # where a 3x3 kernel reads padding
        result[side] = {
            "differ": int(differs.sum()),
            "largest": int(difference.max()),
            "at_border_only": bool(not (differs & ~border[:, :, None]).any()),
            "channels": [int(c) for c in np.flatnonzero(differs.any(axis=(0, 1)))],
        }
    return result


@pytest.mark.parametrize(("teflon", "name"), [(t, n) for t in TEFLONS for n in sorted(CAPTURES)])
def test_a_real_board_s_capture_on_the_emulated_board(emulated, teflon, name):
    """A model Teflon ran on a real board, run here on the input that board had: the NPU's
    output is the board's where emulation/rk3588.yaml says "board", and differs from it where
    it says "differs" (so that a change shows up); the CPU's is beside it in the report."""
    if peer_suite.cached(PINS) is None:
        pytest.skip(NOT_PEER)
    found = [
        capture
        for capture in emulated.all("board-capture")
        if capture["name"] == name and capture["teflon"] == teflon
    ]
    assert found, f"the guest did not run the capture {name} under Teflon {teflon}"
    verdict = capture_verdict(found[0], _capture_tensors(CAPTURES[name])[1])
    print(f"\n{name} under Teflon {teflon}: {verdict}")
    assert verdict["ran"], verdict
    same = verdict["npu"]["differ"] == 0
    assert same == (CAPTURES[name]["expect"][teflon] == "board"), verdict
    # Where it differs, only where the kernel reads padding (emulation/rk3588.yaml:
    # silicon-arithmetic): the interior is the board's.
    assert same or verdict["npu"]["at_border_only"], verdict


def _case(run: board.Run, name: str, teflon: str = FIRST_TEFLON) -> dict:
    reason = _not_cached(name)
    if reason:
        pytest.skip(reason)
    found = [case for case in run.under("case", teflon) if case["name"] == name]
    assert found, f"the guest did not run case {name} under Teflon {teflon}"
    return found[0]


EVERY_CASE = [(teflon, name) for teflon in TEFLONS for name in sorted(CASES)]


@pytest.mark.parametrize(("teflon", "name"), EVERY_CASE)
def test_teflon_delegates_the_model_to_the_rocket_npu(emulated, teflon, name):
    case = _case(emulated, name, teflon)
    assert case["cpu_plan"] and "DELEGATE" not in case["cpu_plan"], case
    assert case["plan"] is not None, case["plan_stderr"]
    assert "DELEGATE" in case["plan"], case["plan"]  # one node per part Teflon took


@pytest.mark.parametrize(
    ("teflon", "name"),
    [(t, n) for t, n in EVERY_CASE if PINS.expectation(CASES[n], t) == "agree"],
)
def test_the_npu_agrees_with_the_cpu(emulated, teflon, name):
    case = _case(emulated, name, teflon)
    golden = case["golden"]
    assert golden and golden.get("ok"), case
    assert _passed(name, golden), f"{name} under Teflon {teflon}: {golden['verdict']}"


@pytest.mark.parametrize(
    ("teflon", "name"),
    [(t, n) for t, n in EVERY_CASE if PINS.expectation(CASES[n], t) == "differs"],
)
def test_known_gaps_still_differ(emulated, teflon, name):
    """Expected failures, each named and explained (emulation/rk3588.yaml, docs/
    emulated-board.md): when one starts to agree, the emulator, Teflon or rocket changed,
    and emulation/rk3588.yaml says so next."""
    case = _case(emulated, name, teflon)
    golden = case["golden"]
    assert golden and golden.get("ok"), case
    assert not _passed(name, golden), (
        f"{name} agrees now under Teflon {teflon}: {golden['verdict']}"
    )
    print(f"\n{name} under Teflon {teflon}: {golden['verdict']}")


# Why a case differs, each shown from this run: the registers and buffers the NPU model
# logged for the case's jobs, and the case's model rebuilt on the host.
#
# Mesa 26.1's element-wise scale for an addition off its table: add_scale 0.0 as
# rkt_regcmd.c converts it (fui(0.0) is 0: EW_OP_CVT_SHIFT 142 - 1 in its six bits, and
# EW_OP_CVT_SCALE 1 << 14).
TABLE_MISS_EW_CVT_SCALE = ((142 - 1) & 0x3F) << 16 | 1 << 14


def _table_miss(
    jobs: list[registers.Job], _model: Path, _verdict: str, _wanted: list[registers.Job]
) -> str | None:
    added = [task for task in registers.programmed(jobs) if not task["DPU_EW_CFG"] & 0x3]
    missed = [task for task in added if task["DPU_EW_CVT_SCALE_VALUE"] == TABLE_MISS_EW_CVT_SCALE]
    return None if missed else f"no addition of {len(added)} has Mesa's scale for a table miss"


def _narrow_kernels(
    jobs: list[registers.Job], _model: Path, _verdict: str, _wanted: list[registers.Job]
) -> str | None:
    """A task over 17 to 31 input channels whose weights buffer holds weights where a
    WEIGHT_SIZE1-deep kernel has its padding channels (a constant: the zero point)."""
    for task, buffers in zip(registers.programmed(jobs), registers.read(jobs), strict=False):
        real = ((task["CNA_DATA_SIZE1"] >> 16) & 0x3FFF) + 1
        depth = task["CNA_WEIGHT_SIZE1"]
        weights = buffers.get("weights")
        if not (17 <= real <= 31 and depth == 32 and weights and weights.data):
            continue
        kernels = len(weights.data) // depth
        padding = {weights.data[k * depth + i] for k in range(kernels) for i in range(real, depth)}
        if len(padding) > 1:
            return None
    return "no task over 17 to 31 channels has weights in its kernels' padding"


def _fused_addition(
    _jobs: list[registers.Job], model: Path, verdict: str, _wanted: list[registers.Job]
) -> str | None:
    """The board's largest difference is the fused addition's, within a step of rounding."""
    from npuctl.platforms.rocket.litert import interpreter
    from npuctl.platforms.rocket.probe import golden_input
    from testkit.fused_addition import fused_and_cpu

    (tensor,) = interpreter(model, None).get_input_details()
    fused, cpu = fused_and_cpu(model, golden_input(tensor["shape"], tensor["dtype"]))
    expected = int(np.abs(fused - cpu).max())
    found = re.search(r"largest element difference (\d+)", verdict)
    board = int(found[1]) if found else None
    if board is None or abs(board - expected) > 1:
        return f"the board's largest difference is {board}, the fused addition's {expected}"
    return None


def _unsigned_zero_point(
    jobs: list[registers.Job], model: Path, _verdict: str, _wanted: list[registers.Job]
) -> str | None:
    """The first convolution's biases are Mesa's correction with the zero points held
    unsigned (rkt_coefs.c: calculate_bias_correction), not the correct ones."""
    from npuctl.platforms.rocket.litert import interpreter

    loaded = interpreter(model, None)
    operation = next(op for op in loaded._get_ops_details() if op["op_name"] == "CONV_2D")
    source, weights, bias = operation["inputs"]
    details = {item["index"]: item for item in loaded.get_tensor_details()}
    kernels = loaded.get_tensor(weights).reshape(details[weights]["shape"][0], -1)
    input_zero = int(details[source]["quantization"][1])
    weight_zero = int(details[weights]["quantization"][1])
    unsigned = ((kernels.astype(np.int64) & 0xFF) - (weight_zero & 0xFFFFFFFF)) * (
        (input_zero & 0xFFFFFFFF) - 0x80
    )
    expected = (
        loaded.get_tensor(bias).astype(np.int64) - unsigned.sum(axis=1) + 2**31
    ) % 2**32 - 2**31
    logged = registers.read(jobs)[0]["biases"].data or b""
    found = np.frombuffer(logged, dtype="<i4")[: len(expected)]
    if found.tolist() != expected.tolist():
        return f"biases {found[:4].tolist()}, Mesa's unsigned correction {expected[:4].tolist()}"
    return None


def _weight_packing(
    jobs: list[registers.Job], _model: Path, _verdict: str, wanted: list[registers.Job]
) -> str | None:
    """Mesa 26.1 programs every register as the wanted Teflon does for the case and packs
    its weights otherwise (26.2's "pad weight packing input channels to
    FEATURE_ATOMIC_SIZE"): the weights buffers are all that differ."""
    if not wanted or registers.programmed(jobs) != registers.programmed(wanted):
        return "the registers differ from the wanted Teflon's, not only the weights"
    weights = [
        [buffers["weights"].digest for buffers in registers.read(side) if "weights" in buffers]
        for side in (jobs, wanted)
    ]
    return None if weights[0] != weights[1] else "the weights are the wanted Teflon's too"


DEPTHWISE_MODE = 3  # CNA_CONV_CON1's CONV_MODE of a depthwise convolution (Mesa's rkt_regcmd.c)


def _pad_second_byte(
    jobs: list[registers.Job], _model: Path, _verdict: str, _wanted: list[registers.Job]
) -> str | None:
    """A depthwise convolution of the case reads padding, and Mesa wrote its pad value in
    one byte (CNA_PAD_CON1's two low bytes differ): the NPU pads the odd channels of the
    first 32 of each 64 with the second byte (QEMU patch 0013, tools/rocket_emu/pad_lanes.py)."""
    for task in registers.programmed(jobs):
        value = task.get("CNA_PAD_CON1", 0)
        if (
            task.get("CNA_CONV_CON1", 0) & 0xF == DEPTHWISE_MODE
            and task.get("CNA_PAD_CON0", 0)
            and value & 0xFF != (value >> 8) & 0xFF
        ):
            return None
    return "no padded depthwise convolution of the case has a pad value of two bytes that differ"


CAUSES: dict[str, Callable[[list[registers.Job], Path, str, list[registers.Job]], str | None]] = {
    "pad-second-byte": _pad_second_byte,
    "addition-table": _table_miss,
    "narrow-kernels": _narrow_kernels,
    "weight-packing": _weight_packing,
    "fused-addition": _fused_addition,
    "unsigned-zero-point": _unsigned_zero_point,
}


def _model_of(name: str) -> str | None:
    """The published model a case runs (Mesa's name for it), by its own hardware test or by
    the case that runs the same file whole."""
    case = CASES[name]
    if "hardware" in case:
        return str(case["hardware"]["model"])
    file = case.get("published", {}).get("file")
    return next(
        (
            str(other["hardware"]["model"])
            for other in CASES.values()
            if "hardware" in other
            and other["hardware"]["operation"] == "whole"
            and other.get("published", {}).get("file") == file
        ),
        None,
    )


def _accumulated_rounding(run: board.Run, name: str, teflon: str) -> str | None:
    """Each of the model's operations this run computed alone (the cases that stand for
    Mesa's Models.Op/<model>_<NNN>) is within Mesa's tolerance of the CPU under the same
    Teflon, but those a cause the whole also names explains: the whole's difference is
    theirs grown through the network, not another operation computed wrongly."""
    model = _model_of(name)
    # An operation that differs alone by a cause the whole names too is that cause's part.
    named = set(PINS.causes(CASES[name], teflon)) - {"accumulated-rounding"}
    alone = [
        other
        for other, case in CASES.items()
        if "published" in case
        and case.get("hardware", {}).get("model") == model
        and case["hardware"]["operation"] != "whole"
        and not named & set(PINS.causes(case, teflon))
    ]
    if not alone:
        return f"no operation of {model} ran alone"
    differ = []
    for other in alone:
        ran = [case for case in run.under("case", teflon) if case["name"] == other]
        golden = ran[0]["golden"] if ran else None
        if not golden or not golden.get("ok") or not _passed(other, golden):
            differ.append(other)
    return f"alone, {', '.join(differ)} differ too" if differ else None


# Causes shown by the other cases of the same run rather than by the case's own jobs.
RUN_CAUSES: dict[str, Callable[[board.Run, str, str], str | None]] = {
    "accumulated-rounding": _accumulated_rounding,
}


def test_every_cause_a_case_may_name_has_its_check():
    schema = json.loads((REPO / "emulation/board.schema.json").read_text())
    named = schema["properties"]["golden_cases"]["items"]["properties"]["explained"]
    assert set(named["additionalProperties"]["items"]["enum"]) == set(CAUSES) | set(RUN_CAUSES)
    assert not set(CAUSES) & set(RUN_CAUSES)


@pytest.mark.parametrize(
    ("teflon", "name", "cause"),
    [(t, n, c) for t, n in EVERY_CASE for c in PINS.causes(CASES[n], t)],
)
def test_each_expected_difference_has_the_cause_it_names(
    emulated, case_jobs, tmp_path, teflon, name, cause
):
    """An expected difference is explained, and the explanation holds in this run: Mesa's
    registers or buffers show the cause (or the host computes the difference it makes)."""
    golden = _case(emulated, name, teflon)["golden"]
    assert golden and golden.get("ok") and not _passed(name, golden), golden
    if cause in RUN_CAUSES:
        problem = RUN_CAUSES[cause](emulated, name, teflon)
        assert problem is None, f"{name} under Teflon {teflon}: {cause}: {problem}"
        return
    model = _build_case(name, tmp_path)
    jobs = case_jobs[teflon, name]
    problem = CAUSES[cause](
        jobs, model, golden["verdict"], case_jobs.get((SERVED_TEFLON, name), [])
    )
    assert problem is None, f"{name} under Teflon {teflon}: {cause}: {problem}"


@pytest.mark.parametrize(("teflon", "name"), EVERY_CASE)
def test_every_case_s_register_commands_are_recorded(emulated, case_jobs, teflon, name):
    """The NPU model logged every job the case ran (the board's count of them before and
    after it), and each job's register commands decode into known registers."""
    case = _case(emulated, name, teflon)
    jobs = case_jobs[teflon, name]
    first, end = case["jobs"]
    assert end > first and len(jobs) == end - first, (case["jobs"], len(jobs))
    programmed = registers.programmed(jobs)
    assert programmed and all("CNA_DATA_SIZE0" in task for task in programmed)
    # The first job is the case's first convolution: its input is the model's.
    size = re.search(r"-(\d+)(?:x\d+)?(?:-int8)?$", name)
    width = programmed[0]["CNA_DATA_SIZE0"] >> 16
    assert size is None or width == int(size[1]), f"{name}: the first job reads {width} wide"
    unknown = {register for task in programmed for register in task if register.startswith("REG_")}
    assert unknown <= {"REG_3030", "REG_40C4"}, unknown  # two Mesa writes with no name


def test_npuctl_serve_classifies_over_the_forwarded_port(emulated):
    serve = emulated.first("serve")
    assert serve is not None and serve["ready"], serve
    assert not emulated.serve_error, emulated.serve_error
    answer = emulated.served["classify"]
    assert answer["exit"] == 0, answer
    body = json.loads(answer["body"])
    assert body["success"] is True and len(body["predictions"]) == 3, body
    assert body["predictions"][0]["label"].startswith("class ")


def test_npuctl_serve_answers_mobilenet_v2_as_the_cpu_does(emulated):
    """A Triton client's request to the served MobileNetV2: npuctl's golden check of the
    board's scores against the CPU interpreter's for the same tensor passes."""
    assert not emulated.serve_error, emulated.serve_error
    verdict = v2_verdict(emulated.served.get("mobilenet-v2"))
    assert verdict["passed"], verdict["verdict"]
    print(f"\nserved MobileNetV2: {verdict['verdict']}")


def v2_verdict(answer: dict | None) -> dict:
    """The board's answer to the Triton request against the CPU's scores, by npuctl's
    golden check."""
    from npuctl.platforms.rocket.golden import compare

    if not answer or answer.get("status") != 200:
        return {"passed": False, "verdict": f"no answer: {str(answer)[:300]}"}
    served = np.array(json.loads(answer["body"])["outputs"][0]["data"]).astype(np.uint8)
    verdict = compare(served, np.array(answer["cpu"], dtype=np.uint8))
    return {"passed": verdict.passed, "verdict": verdict.describe()}


def test_npuctl_serve_detects_what_the_cpu_detects(emulated):
    """Frigate's DeepStack request with the SSDLite detector served on the board: the same
    detections as the CPU interpreter gives for the same frame, box for box."""
    assert not emulated.serve_error, emulated.serve_error
    verdict = detection_verdict(emulated.served.get("detect"))
    assert verdict["passed"], verdict["verdict"]
    print(f"\nserved SSDLite: {verdict['verdict']}")


# What Teflon hands the NPU from the published SSDLite MobileDet (its 120-operation partition).
NPU_OPERATIONS = {"CONV_2D", "DEPTHWISE_CONV_2D", "ADD", "RESHAPE"}


def test_frigates_zmq_detector_on_the_board_detects_what_the_cpu_detects(emulated):
    """Frigate's own zmq detector logic (pyzmq) from the host to npuctl serve --zmq on the
    board: its model request answered, and the frame's 20 rows the CPU's detections."""
    assert not emulated.serve_error, emulated.serve_error
    verdict = frigate_verdict(emulated.served.get("frigate"))
    print(f"\nFrigate's zmq frame: {verdict['verdict']}")
    assert verdict["passed"], verdict


@pytest.mark.parametrize("teflon", TEFLONS)
def test_frigates_teflon_detector_in_process_detects_what_the_cpu_detects(emulated, teflon):
    """Frigate's own teflon_tfl code (detector_utils.py: the delegate loaded in process, the
    four outputs of the SSD post-processing read into 20 rows) with the served SSDLite on the
    board under each Teflon: the rows are the CPU's detections of the same frame."""
    (found,) = emulated.under("frigate-teflon", teflon)
    assert found["exit"] == 0 and found["rows"] is not None, found["stderr"]
    verdict = _frigate_teflon_verdict(emulated, teflon)
    print(f"\nFrigate's teflon_tfl under Teflon {teflon}: {verdict['verdict']}")
    assert verdict["passed"], verdict


def test_mesas_addition_table_is_five_chains_of_three():
    """Mesa's sixteen entries are five runs of three, each sum the next one's operand (one
    more key leads into the first run too): MobileDet's five stages of three residual
    blocks, which ssdlite-mobiledet-320 takes in turn."""
    runs = [MOBILEDET_ADDITIONS[start : start + 3] for start in range(0, 15, 3)]
    for run in runs:
        for addition, following in pairwise(run):
            assert abs(addition.sum_scale - following.operand_scale) < 1e-5, run
        assert not any(abs(run[-1].sum_scale - key) < 1e-5 for key in MESA_TABLE), run
    used = {addition.operand_scale for addition in MOBILEDET_ADDITIONS}
    (left,) = set(MESA_TABLE) - used
    assert abs(MESA_TABLE[left].sum_scale - runs[0][1].operand_scale) < 1e-5


def test_the_mobiledet_build_has_the_published_models_shape(tmp_path):
    """ssdlite-mobiledet-320 as the published file is laid out: 120 operations the NPU takes
    (66 convolutions, 27 depthwise, 15 additions, 12 reshapes), six feature maps from 20x20
    to 1x1, 2034 anchors, each addition's shortcut at a scale of Mesa's table."""
    from npuctl.platforms.rocket.litert import interpreter

    loaded = interpreter(ssdlite_mobiledet(tmp_path / "mobiledet.tflite"), None)
    tensors = {tensor["index"]: tensor for tensor in loaded.get_tensor_details()}
    operations = [
        operation
        for operation in loaded._get_ops_details()
        if operation["op_name"] in NPU_OPERATIONS
    ]
    counts = {name: sum(op["op_name"] == name for op in operations) for name in NPU_OPERATIONS}
    assert counts == {"CONV_2D": 66, "DEPTHWISE_CONV_2D": 27, "ADD": 15, "RESHAPE": 12}
    shortcuts = [
        tensors[op["inputs"][1]]["quantization"][0] for op in operations if op["op_name"] == "ADD"
    ]
    assert shortcuts == pytest.approx([a.operand_scale for a in MOBILEDET_ADDITIONS], abs=1e-5)
    anchors = next(t for t in tensors.values() if t["name"] == "anchors")
    assert anchors["shape"].tolist() == [2034, 4]
    maps = [
        int(t["shape"][1])
        for t in tensors.values()
        if t["name"].startswith("box_") and t["name"][4:].isdigit()
    ]
    assert maps == [
        1200,
        600,
        150,
        54,
        24,
        6,
    ]  # 20x20x3, then 6 anchors at 10, 5, 3, 2, 1


def test_npuctl_serve_spreads_its_jobs_over_the_three_cores(emulated):
    """npuctl serve --workers 3 with three Triton clients at once: every core ran jobs (its
    interrupt count, one per job, grew while they were served), and every answer, alone or
    side by side, is identical to the first."""
    serve = emulated.first("serve")
    assert serve is not None and serve["ready"], serve
    assert not emulated.serve_error, emulated.serve_error
    answers = emulated.served["infer"]
    assert len(answers) == CONCURRENT * 4
    sent = [*emulated.served["alone"], *answers]
    assert all(answer["status"] == 200 for answer in sent), sent[0]
    outputs = _served_outputs(emulated.served)
    # Cores of one board compute the same: every answer is the first one, element for element.
    assert all(output == outputs[0] for output in outputs), _differences(outputs)
    jobs = _core_jobs(serve)
    assert all(count > 0 for count in jobs.values()), (
        serve["core_jobs"],
        serve["accel_files"],
    )


@pytest.mark.parametrize(
    "patch",
    sorted(
        path
        for folder in (PINS.patches("qemu"), PINS.patches("helper"))
        for path in folder.glob("*.patch")
    ),
    ids=lambda path: path.name,
)
def test_the_emulators_patches_have_dep3_headers(patch):
    header = patch.read_text(encoding="utf-8").split("\n---", 1)[0]
    for field in DEP3_FIELDS:
        assert re.search(rf"(?m)^{field}: \S", header), f"{patch.name} has no {field}"
    listed = (patch.parent / "series").read_text(encoding="utf-8").split()
    assert patch.name in listed


def _pad_row(what: str, depthwise: tuple, every: tuple, boards: str) -> dict:
    """A row of the pad-value readings' report: operation, kind, shape, zero point, value;
    each reading's elements beyond the tolerance and largest difference."""
    operation, kind, shape, zero_point, value = what.split()
    return {
        "operation": operation,
        "kind": kind,
        "shape": f"{shape} k3 s1",
        "zero_point": int(zero_point),
        "pad_value": f"0x{int(value, 16):08x}",
        "readings": {
            name: {"beyond": beyond, "largest": largest}
            for name, (beyond, largest) in (("depthwise", depthwise), ("every convolution", every))
        },
        "boards": {"26.1": boards, "26.2": boards},
    }


def test_the_results_page_is_generated_from_the_json_report(tmp_path):
    def case(passed: bool, verdict: str) -> dict:
        return {
            "expect": "agree",
            "golden": {"ok": True, "passed": passed, "verdict": verdict},
            "seconds": 0.5,
            "host_seconds": 4.2,
            "registers": {"jobs": 1, "tasks": 1, "digest": "0" * 16},
        }

    source = tmp_path / "rocket-emu.json"
    source.write_text(
        json.dumps(
            {
                "schema": REPORT_SCHEMA,
                "generated": "2026-11-24T00:00:00+00:00",
                "kernel": PINS.release,
                "qemu_build_seconds": 300.0,
                "guest_build_seconds": 600.0,
                "boot_seconds": 120.0,
                "install_seconds": 9.5,
                "phases": {"kernel and init": 30.0, "Teflon 26.2: every case": 12.0},
                "teflons": {
                    "26.1": {
                        "installed": None,
                        "doctor": {"teflon.version": "Mesa Teflon 26.1: adds wrongly"},
                        "cases": {"conv1x1-16-8x8": case(False, "difference 9")},
                    },
                    "26.2": {
                        "installed": {"exit": 0, "version": "26.2", "seconds": 7.0},
                        "doctor": {"golden.mobilenet-v2": "agree"},
                        "cases": {"conv1x1-16-8x8": case(True, "difference 1")},
                    },
                },
                "register_differences": {
                    "conv1x1-16-8x8": [
                        {"register": "DPU_OUT_CVT_SHIFT", "tasks": 2, "values": [[13], [14, 15]]}
                    ]
                },
                "served": {
                    "teflon": "26.2",
                    "model": "mobilenet.tflite",
                    "golden": "Golden check: NPU and CPU agree",
                    "answers": 13,
                    "largest_difference": 0,
                    "core_jobs": {"fdab0000": 5, "fdac0000": 6, "fdad0000": 7},
                },
                "mobilenet_v2": {
                    "model": "v2.tflite",
                    "case": "mobilenet-v2-published-scales",
                    "golden": "Golden check, mobilenet-v2: NPU and CPU agree",
                    "served": {"passed": True, "verdict": "top-1 737 on both"},
                },
                "detector": {
                    "model": "ssdlite.tflite",
                    "case": "ssdlite-mobiledet-320",
                    "golden": "Golden check, ssdlite: NPU and CPU agree",
                    "served": {"passed": True, "verdict": "10 detections as on the CPU"},
                },
                "hardware": {
                    "tolerance": 6,
                    "rows": [
                        {
                            "case": "ssdlite-mobiledet-320",
                            "test": "Models.Op/mobiledet_ssdlite_mobiledet_coco_qat_postprocess",
                            "runs": "SSDLite MobileDet at 320x320",
                            "lookalike": True,
                            "teflons": {
                                "26.1": {
                                    "boards": "fail",
                                    "emulated": "pass",
                                    "blind_spots": ["silicon-arithmetic"],
                                },
                                "26.2": {"boards": "fail", "emulated": None, "blind_spots": []},
                            },
                        },
                        {
                            "case": "mesa-mobiledet-op086",
                            "test": "Models.Op/mobiledet_086",
                            "runs": "DEPTHWISE_CONV_2D 1x10x10x384 -> 1x10x10x384",
                            "lookalike": False,
                            "teflons": {
                                "26.1": {
                                    "boards": "fail",
                                    "emulated": "fail",
                                    "difference": 9,
                                    "blind_spots": [],
                                },
                                "26.2": {
                                    "boards": "fail",
                                    "emulated": "pass",
                                    "difference": 1,
                                    "blind_spots": ["silicon-arithmetic"],
                                },
                            },
                        },
                    ],
                },
                "photographs": [
                    {
                        "case": "mesa-mobiledet-photo",
                        "picture": "grace_hopper.bmp",
                        "teflons": {
                            "26.1": {
                                "verdict": "3 detections on both",
                                "passed": True,
                                "frigate": frigate_comparison(
                                    [[0, 0.8, 0.1, 0.1, 0.9, 0.6], [31, 0.45, 0, 0, 0.2, 0.2]],
                                    [[0, 0.79, 0.1, 0.1, 0.9, 0.6], [31, 0.41, 0, 0, 0.2, 0.2]],
                                ),
                            },
                            "26.2": {"verdict": None, "passed": None, "frigate": None},
                        },
                    }
                ],
                "peer_suite": {
                    "repository": "https://example.org/peer",
                    "commit": "0123456789abcdef",
                    "ran": True,
                    "passed": 1,
                    "gates": [
                        {
                            "name": "replay_dw_mesa",
                            "description": "a real board's buffers",
                            "expect": "fail",
                            "verdict": "fail",
                            "seconds": 0.1,
                            "findings": ["compare: 227/4096 mismatch | -> MISMATCH"],
                        },
                        {
                            "name": "uapi_selftest_rocket",
                            "description": "the UAPI",
                            "expect": "pass",
                            "verdict": "pass",
                            "seconds": 0.5,
                            "findings": [],
                        },
                    ],
                    "captures": [
                        {
                            "name": "teflon-dw",
                            "description": "a depthwise",
                            "teflons": {
                                "26.1": {
                                    "expect": "differs",
                                    "ran": True,
                                    "elements": 4096,
                                    "npu": {"differ": 227, "largest": 82},
                                    "cpu": {"differ": 4096, "largest": 133},
                                },
                                "26.2": {"expect": "board", "ran": False, "error": "hung"},
                            },
                        }
                    ],
                },
                "pad_lanes": {
                    "readings": ["depthwise", "every convolution"],
                    "modelled": "depthwise",
                    "tolerance": 6,
                    "models": [
                        {
                            "model": "mobiledet",
                            "file": "m.tflite",
                            "operations": [
                                _pad_row(
                                    "006 CONV_2D 80x80x16 147 0x13", (0, 0), (5529, 117), "pass"
                                ),
                                _pad_row(
                                    "017 CONV_2D 40x40x40 125 0xfffffffd", (0, 1), (40, 10), "pass"
                                ),
                                _pad_row(
                                    "086 DEPTHWISE_CONV_2D 10x10x384 132 0x4",
                                    (128, 38),
                                    (128, 38),
                                    "fail",
                                ),
                            ],
                        },
                        {"model": "mobilenetv1", "file": "v1.tflite", "operations": []},
                    ],
                },
            }
        )
    )
    output = tmp_path / "docs" / "emulated-board-results.md"
    command = [sys.executable, "-m", "rocket_emu.tables", str(source), str(output)]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    page = output.read_text()
    assert "| a cold run (the three above) | 1020 s (17.0 min) |" in page
    assert (
        "| conv1x1-16-8x8 | agree; failed: difference 9 | agree; passed: difference 1 "
        "| 4.2 / 4.2 |" in page
    )
    assert "| of which: Teflon 26.2: every case | 12 s |" in page
    assert "| conv1x1-16-8x8 | DPU_OUT_CVT_SHIFT | 2 | 0xd | 0xe, 0xf |" in page
    assert "1 of 2 passed" in page
    assert (
        "| mobiledet | 086 DEPTHWISE_CONV_2D | 10x10x384 k3 s1 | 132 | 0x00000004 "
        "| 26.1: fail / 26.2: fail | 128 (38) | 128 (38) |" in page
    )
    assert "no such convolution: mobilenetv1." in page
    assert "| 0 (1) | 40 (10) |" in page  # elements beyond the tolerance, then the largest
    assert "depthwise: 3 of 3; every convolution: 1 of 3." in page
    assert (
        "| replay_dw_mesa | a real board's buffers | fail | fail | 0.1 "
        "| compare: 227/4096 mismatch \\| -> MISMATCH |" in page
    )
    assert "| uapi_selftest_rocket | the UAPI | pass | pass | 0.5 | - |" in page
    assert (
        "| teflon-dw (a depthwise) | 26.1 | differs | 227 of 4096 differ, largest 82 "
        "| 4096 of 4096 differ, largest 133 |" in page
    )
    assert "| teflon-dw | 26.2 | board | not run | - |" in page
    assert "| 26.1 | in the cached root | Mesa Teflon 26.1: adds wrongly | None |" in page
    assert "| 26.2 | dpkg exit 0, 7 s | None | agree |" in page
    assert "| core fdab0000 | core fdac0000 | core fdad0000 |\n|---|---|---|\n| 5 | 6 | 7 |" in page
    assert "the largest element difference from the first is 0" in page
    assert "answer for the frame:\npassed, 10 detections as on the CPU." in page
    assert "(ssdlite.tflite, built as the `ssdlite-mobiledet-320`\ncase)" in page
    assert "against the CPU interpreter's scores for the same tensor: passed, top-1 737" in page
    assert (
        "| ssdlite-mobiledet-320 | `Models.Op/mobiledet_ssdlite_mobiledet_coco_qat_postprocess` "
        "| lookalike: SSDLite MobileDet at 320x320 | fail / pass | fail / not run "
        "| silicon-arithmetic |" in page
    )
    assert (
        "| mesa-mobiledet-op086 | `Models.Op/mobiledet_086` | published: DEPTHWISE_CONV_2D "
        "1x10x10x384 -> 1x10x10x384 | fail / fail, largest difference 9 "
        "| fail / pass, largest difference 1 "
        "| silicon-arithmetic |" in page
    )

    assert (
        "| mesa-mobiledet-photo (grace_hopper.bmp) | 26.1 | passed: 3 detections on both "
        "| class 0 0.800 (true positive); class 31 0.450 (kept) "
        "| class 0 0.790 (true positive); class 31 0.410 (kept) "
        "| yes, largest score difference 0.01 |" in page
    )
    assert "| mesa-mobiledet-photo | 26.2 | failed: None | not run | not run | - |" in page

    source.write_text("[]")
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    assert result.returncode == 2 and "has schema None" in result.stderr
    source.write_text(json.dumps({"schema": REPORT_SCHEMA, "cases": {}}))
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    assert result.returncode == 2 and "lacks a field" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    missing = [sys.executable, "-m", "rocket_emu.tables", str(tmp_path / "none.json"), "x.md"]
    result = subprocess.run(missing, capture_output=True, text=True, check=False)
    assert result.returncode == 2
    assert result.stderr.strip().endswith("run 'make check-rocket-emu' first")


def test_the_boot_is_timed_by_the_host_part_by_part():
    """The report's parts come from when the guest's lines reached the host: each part from
    the line that starts it to the next one's, the last to the end; a case's seconds are
    from the line before its result, by Teflon and case."""
    case = 'LAB-RESULT case {"name": "%s", "teflon": "%s"}'
    marks = [
        (30.0, "LAB: booted 7"),
        (40.0, "LAB: accel node after 0s"),
        (45.0, "LAB: phase installing npuctl's .debs"),
        (50.0, "LAB-RESULT install {}"),
        (50.0, "LAB: phase Teflon 26.1: npuctl doctor"),
        (90.0, "LAB: phase Teflon 26.1: every case"),
        (100.0, case % ("small", "26.1")),
        (112.5, case % ("large", "26.1")),
        (113.0, "LAB: phase Teflon 26.2: installing it"),
        (120.0, "LAB: phase Teflon 26.2: every case"),
        (125.0, case % ("small", "26.2")),
        (130.0, "LAB: phase npuctl serve starting"),
        (150.0, board.READY),
        (190.0, board.REQUESTS_DONE),
    ]
    found = board.phases(marks, 200.0)
    assert found == {
        board.FIRST_PHASE: 30.0,
        "devices: udev's coldplug, rocket's probe": 15.0,
        "installing npuctl's .debs": 5.0,
        "Teflon 26.1: npuctl doctor": 40.0,
        "Teflon 26.1: every case": 23.0,
        "Teflon 26.2: installing it": 7.0,
        "Teflon 26.2: every case": 10.0,
        "npuctl serve starting": 20.0,
        "the host's requests": 40.0,
        "serve's stop, dmesg, power off": 10.0,
    }
    assert board.case_seconds(marks) == {
        ("26.1", "small"): 10.0,
        ("26.1", "large"): 12.5,
        ("26.2", "small"): 5.0,
    }
    cut = board.phases(marks[:3], 60.0)  # a boot that stopped while installing
    assert list(cut) == [board.FIRST_PHASE, "devices: udev's coldplug, rocket's probe",
                         "installing npuctl's .debs"]  # fmt: skip
    assert cut["installing npuctl's .debs"] == 15.0


def test_a_case_that_ends_the_board_s_child_ends_only_itself(tmp_path, monkeypatch, capsys):
    """The guest's cases run in one child; one that kills it is reported with the child's
    exit and stderr, and the cases after it still run, in a new child."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("guest_jobs", board.GUEST_FILES / "jobs.py")
    assert spec and spec.loader
    jobs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(jobs)
    listed = [{"name": f"case{n}", "file": f"case{n}.tflite"} for n in range(4)]
    (tmp_path / "cases.json").write_text(json.dumps(listed))
    monkeypatch.setattr(jobs, "CASES", tmp_path)
    monkeypatch.setattr(
        jobs,
        "CASES_CHILD",
        "import json, os, sys\n"
        "for model in sys.argv[2:]:\n"
        "    if model.endswith('case1.tflite'):\n"
        "        sys.stderr.write('Segmentation fault\\n'); sys.stderr.flush(); os._exit(139)\n"
        "    print('CASE ' + json.dumps({'model': model, 'golden': {'ok': True},"
        " 'seconds': 0.1}), flush=True)\n",
    )
    jobs.cases("26.2")
    found = board.results(capsys.readouterr().out)
    assert [document["name"] for _, document in found] == [c["name"] for c in listed]
    assert {document["teflon"] for _, document in found} == {"26.2"}
    crashed = found[1][1]
    assert crashed["golden"] is None and crashed["golden_exit"] == 139
    assert "Segmentation fault" in crashed["golden_stderr"]
    assert all(found[n][1]["golden"] == {"ok": True} for n in (0, 2, 3))
