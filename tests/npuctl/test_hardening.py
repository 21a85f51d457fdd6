"""npuctl as users really run it: hostile files and arguments, Ctrl-C at any time, files that
other users read, and a vendor library that may crash on any file it is handed."""

import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path

import pytest
import yaml

from npuctl.files import write_atomically
from npuctl.models.proofs import FileIdentity, LoadProofs

from .conftest import interruptible
from .test_cli_run import one_line_error
from .test_models import Server

SOURCE = Path(__file__).resolve().parents[2] / "npuctl" / "src"


def png_header(width: int, height: int) -> bytes:
    """A PNG that claims ``width`` x ``height`` pixels: signature, IHDR, an empty IDAT, IEND.
    Enough for any decoder to read the size; decoding it would take gigabytes."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", b"") + chunk(b"IEND", b"")


def loads(board) -> int:
    return sum(1 for call in board.calls() if call == "load_graph")


# -- 1. a file reaches libnoe in-process only after it loaded once in a child -----------------


@pytest.fixture
def cache(board, tmp_path):
    board.env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    return tmp_path / "cache" / "npuctl" / "load-proofs.json"


def pin(board, name: str, path: Path) -> None:
    """Record ``path`` in the lock file as its first verified download would."""
    from npuctl.models.manifest import load_manifest
    from npuctl.models.store import Lock

    entry = load_manifest().get(name)
    data = path.read_bytes()
    Lock.load(board.models).record(entry, hashlib.sha256(data).hexdigest(), len(data))


def test_a_pinned_file_that_crashes_libnoe_is_an_error_not_a_crash(board, cache, vocab_in):
    broken = board.models / "clip_txt.cix"
    broken.write_bytes(b"truncated mirror: not a model at all" * 100)
    pin(board, "clip-text", broken)
    for args in (("run", "clip-text", "hello"), ("bench", "clip-text", "-n", "2")):
        line = one_line_error(board.npuctl(*args), 4)
        assert "crashed libnoe (SIGSEGV)" in line
    assert not cache.exists() or "clip_txt" not in cache.read_text()


def test_the_proof_is_recorded_once_and_then_trusted(board, cache, vocab_in):
    model = board.clip_text()
    assert board.npuctl("run", "clip-text", "hello").returncode == 0
    assert loads(board) == 2  # the child, then this process
    proofs = json.loads(cache.read_text())["proofs"]
    (proof,) = proofs.values()
    assert proof["model"] == str(model) and proof["model_size"] == model.stat().st_size
    assert board.npuctl("run", "clip-text", "hello").returncode == 0
    assert loads(board) == 3  # proven: loaded in-process only


def test_a_changed_file_needs_a_new_proof(board, cache, vocab_in):
    model = board.clip_text()
    assert board.npuctl("run", "clip-text", "hello").returncode == 0
    stat = model.stat()
    os.utime(model, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))  # same bytes
    assert board.npuctl("run", "clip-text", "hello").returncode == 0
    assert loads(board) == 4  # the child again
    model.write_bytes(b"corrupted on disk" * 10)
    line = one_line_error(board.npuctl("run", "clip-text", "hello"), 4)
    assert "crashed libnoe" in line


def test_a_proof_is_for_one_library(board, tmp_path):
    library = FileIdentity.of(board.library)
    model = FileIdentity.of(board.clip_text())
    other = tmp_path / "libnoe-other.so"
    shutil.copyfile(board.library, other)
    with other.open("ab") as stream:
        stream.write(b"\0")
    proofs = LoadProofs(tmp_path / "proofs.json")
    assert proofs.record(library, model)
    assert proofs.proven(library, model)
    assert not proofs.proven(FileIdentity.of(other), model)


def test_an_unwritable_proof_cache_costs_a_child_load_only(board, tmp_path, vocab_in):
    board.env["XDG_CACHE_HOME"] = str(tmp_path / "a-file")
    (tmp_path / "a-file").write_text("not a folder")
    board.clip_text()
    assert board.npuctl("run", "clip-text", "hello").returncode == 0
    assert board.npuctl("run", "clip-text", "hello").returncode == 0
    assert loads(board) == 4


@pytest.mark.parametrize(
    "args",
    [
        ("bench", "clip-bpe-vocab", "-n", "2"),
        ("bench", "clip-bpe-vocab", "--model", "{vocab}"),
    ],
)
def test_assets_are_not_models(board, vocab_in, args):
    args = [a.replace("{vocab}", str(vocab_in)) for a in args]
    line = one_line_error(board.npuctl(*args), 2)
    assert "clip-bpe-vocab is not a model" in line
    assert loads(board) == 0


# -- 2. the isolation child cannot be started ----------------------------------------------------


def test_a_child_that_cannot_start_is_a_runtime_error(
    board, vocab_in, tmp_path, monkeypatch, capsys
):
    from npuctl.cli import main

    board.clip_text()
    not_a_program = tmp_path / "python"
    not_a_program.write_bytes(b"\x7fELF but not really")
    not_a_program.chmod(0o755)
    for key, value in board.env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(sys, "executable", str(not_a_program))
    assert main(["run", "clip-text", "hello"]) == 5
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "could not start a child process" in line and "Exec format error" in line
    assert "internal error" not in line


def test_the_doctor_reports_a_child_that_cannot_start(board, tmp_path, monkeypatch, capsys):
    from npuctl.doctor.findings import Report, Status
    from npuctl.platforms.zhouyi.doctor.npu import check_library

    monkeypatch.setattr(sys, "executable", str(tmp_path / "vanished-python"))
    report = Report()
    assert not check_library(board.library, report, 30)
    (finding,) = report.findings
    assert finding.status == Status.FAIL
    assert "could not start a child process" in finding.summary
    assert finding.fix


# -- 3. images ------------------------------------------------------------------------------------


@pytest.mark.parametrize("side", [20_000, 10_000])
def test_decompression_bombs_are_refused_before_decoding(board, tmp_path, side):
    bomb = tmp_path / "bomb.png"
    bomb.write_bytes(png_header(side, side))
    for args in (("run", "yolo", str(bomb)), ("run", "clip-image", str(bomb))):
        result = board.npuctl(*args)
        line = one_line_error(result, 3)
        assert f"{side}x{side}" in line and "--max-image-pixels" in line
        assert "Warning" not in result.stderr


def test_the_pixel_limit_can_be_raised_and_lowered(board, tmp_path, bus_jpg):
    bomb = tmp_path / "bomb.png"
    bomb.write_bytes(png_header(20_000, 20_000))
    raised = board.npuctl("--max-image-pixels", "500000000", "run", "yolo", str(bomb))
    assert "not an image Pillow can read" in one_line_error(raised, 3)  # decoded, found empty
    lowered = board.npuctl("--max-image-pixels", "500000", "run", "yolo", str(bus_jpg))
    assert "810x1080" in one_line_error(lowered, 3)


# -- 4, 5. arguments -----------------------------------------------------------------------------


def test_invalid_utf8_text_is_refused(board, vocab_in):
    board.clip_text()
    command = [sys.executable, "-m", "npuctl", "run", "clip-text", b"caf\xe9 au lait"]
    for extra in ([], ["--json"]):
        result = subprocess.run(command + extra, capture_output=True, env=board.env, check=False)
        assert result.returncode == 3, result.stderr
        (line,) = result.stderr.decode().strip().splitlines()
        assert "not valid UTF-8 (byte 0xe9 at character 4)" in line
        if extra:
            document = json.loads(result.stdout.decode("utf-8"))
            assert document["schema"] == "npuctl-error/1" and document["exit_code"] == 3
    assert loads(board) == 0


@pytest.mark.parametrize(
    "args",
    [
        ("--timeout-ms", "3000000000", "run", "clip-text", "hi"),
        ("--timeout-ms", "0", "run", "clip-text", "hi"),
        ("--max-image-pixels", "0", "run", "yolo", "x.png"),
        ("bench", "clip-text", "-n", "0"),
    ],
)
def test_numbers_out_of_range_are_usage_errors(board, args):
    result = board.npuctl(*args)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and "is not in the range" in result.stderr


def test_the_largest_timeout_reaches_libnoe_intact(board, vocab_in):
    board.clip_text()
    result = board.npuctl("--timeout-ms", str(2**31 - 1), "run", "clip-text", "hi")
    assert result.returncode == 0, result.stderr


# -- 6. output paths -----------------------------------------------------------------------------


def test_annotate_into_a_file_fails_before_the_npu_runs(board, tmp_path, bus_jpg):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    for target in (blocker / "out.png", tmp_path / "out.unknown-type", tmp_path):
        line = one_line_error(
            board.npuctl("run", "yolo", str(bus_jpg), "--annotate", str(target)), 3
        )
        assert "--annotate" in line
    assert board.calls() == []  # the NPU was never opened


def test_an_atomic_write_leaves_nothing_behind_when_interrupted(tmp_path):
    target = tmp_path / "annotated.png"

    def interrupted(path: Path) -> None:
        path.write_bytes(b"half")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_atomically(target, interrupted)
    assert list(tmp_path.iterdir()) == []
    write_atomically(target, lambda path: path.write_bytes(b"whole"))
    assert [p.name for p in tmp_path.iterdir()] == ["annotated.png"]


# -- 8. Ctrl-C while Python is still importing ---------------------------------------------------


def test_ctrl_c_during_start_up_is_one_line(board, tmp_path):
    hook = tmp_path / "hook"
    hook.mkdir()
    # The interrupt arrives exactly while npuctl's command line imports click.
    (hook / "sitecustomize.py").write_text(
        "import os, signal, sys\n"
        "class Interrupt:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'click':\n"
        "            sys.meta_path.remove(self)\n"
        "            os.kill(os.getpid(), signal.SIGINT)\n"
        "        return None\n"
        "sys.meta_path.insert(0, Interrupt())\n"
    )
    env = {**board.env, "PYTHONPATH": str(hook)}
    result = subprocess.run(
        [sys.executable, "-m", "npuctl", "--help"],
        capture_output=True,
        text=True,
        env=env,
        preexec_fn=interruptible,
    )
    assert result.returncode == 130
    assert result.stderr == "npuctl: interrupted\n"


# -- 13. start-up imports ------------------------------------------------------------------------


@pytest.mark.parametrize("args", [["--help"], ["--version"], ["-h"]])
def test_help_imports_no_numpy(board, args):
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "npuctl", *args],
        capture_output=True,
        text=True,
        env=board.env,
        check=True,
    )
    imported = {line.split("|")[-1].strip() for line in result.stderr.splitlines()}
    assert "click" in imported
    assert not {"numpy", "PIL", "yaml", "ctypes"} & imported


# -- 14. long texts ------------------------------------------------------------------------------


def test_long_texts_are_cut_or_refused(board, vocab_in):
    board.clip_text()
    one_word = "a" * 100_000
    assert "--truncate" in one_line_error(board.npuctl("run", "clip-text", one_word), 3)
    result = board.npuctl("run", "clip-text", "--truncate", one_word, "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["embeddings"][0]["dimensions"] == 512


# -- 12. text cleaning metadata -------------------------------------------------------------------


def test_run_json_says_how_text_was_cleaned(board, vocab_in):
    from npuctl.platforms.zhouyi.pipelines.text_fixes import CLEANING

    board.clip_text()
    assert board.npuctl_json("run", "clip-text", "hi")["text_cleaning"] == CLEANING


# -- 7, 11. other users --------------------------------------------------------------------------


@pytest.fixture
def other_user(libnoe_double):
    """Runs npuctl as the unprivileged user 'nobody' from a world-readable copy of the source,
    with the distribution's own Python and packages (a venv under /root is not readable)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to run a command as another user")
    python = "/usr/bin/python3"
    check = subprocess.run(
        [python, "-c", "import click, numpy, PIL, yaml, regex, packaging"], capture_output=True
    )
    runuser = shutil.which("runuser")
    if check.returncode != 0 or runuser is None:
        pytest.skip("needs runuser and Debian's python3 packages: run 'make deps'")
    # pytest's own temporary folders are private to root: this one is not.
    shared = Path(tempfile.mkdtemp(prefix="npuctl-shared-"))
    shared.chmod(0o755)
    shutil.copytree(SOURCE / "npuctl", shared / "src" / "npuctl")
    shutil.copyfile(libnoe_double, shared / "libnoe.so")
    device = shared / "aipu"
    device.write_bytes(b"")
    device.chmod(0o666)
    for path in shared.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    device.chmod(0o666)

    def run(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        environment = {
            "PATH": "/usr/bin:/bin",
            "PYTHONPATH": str(shared / "src"),
            "NPUCTL_LIBNOE": str(shared / "libnoe.so"),
            "NOE_DOUBLE_DEVICE": str(device),
            **env,
        }
        return subprocess.run(
            [runuser, "-u", "nobody", "--", python, "-m", "npuctl", *args],
            capture_output=True,
            text=True,
            env=environment,
            cwd="/",
            timeout=120,
        )

    run.shared = shared
    yield run
    shutil.rmtree(shared)


def test_files_written_as_root_are_readable_by_other_users(board, other_user, clip_vocab):
    models = other_user.shared / "models"
    models.mkdir(mode=0o755)
    model_bytes = b"NOEDOUBLE 1\ninput S32 308 1.0 0\noutput S8 512 27.67 60\n"
    server = Server({"clip.cix": model_bytes, "vocab.gz": clip_vocab.read_bytes()})
    try:
        manifest = other_user.shared / "models.yaml"
        manifest.write_text(
            yaml.safe_dump(
                {
                    "schema": 1,
                    "platform": "zhouyi",
                    "models": {
                        "clip-text": {
                            "file": "clip_txt.cix",
                            "url": server.url("clip.cix"),
                            "needs": ["clip-bpe-vocab"],
                        }
                    },
                    "assets": {
                        "clip-bpe-vocab": {
                            "file": clip_vocab.name,
                            "url": server.url("vocab.gz"),
                            "sha256": hashlib.sha256(clip_vocab.read_bytes()).hexdigest(),
                        }
                    },
                }
            )
        )
        manifest.chmod(0o644)
        env = {**board.env, "NPUCTL_MODELS": str(models), "NPUCTL_MANIFEST": str(manifest)}
        old_umask = os.umask(0o022)
        try:
            fetched = subprocess.run(
                [sys.executable, "-m", "npuctl", "models", "fetch", "clip-text"],
                capture_output=True,
                text=True,
                env=env,
            )
        finally:
            os.umask(old_umask)
        assert fetched.returncode == 0, fetched.stderr
    finally:
        server.close()
    assert (models / "models.lock.json").stat().st_mode & 0o777 == 0o644
    user_env = {"NPUCTL_MODELS": str(models), "NPUCTL_MANIFEST": str(manifest)}
    for args in (
        ("models", "list"),
        ("run", "clip-text", "hello"),
        ("bench", "clip-text", "-n", "2"),
    ):
        result = other_user(*args, env=user_env)
        assert result.returncode == 0, (args, result.stderr)


def test_a_model_directory_of_another_user_is_one_line_with_the_fix(other_user):
    models = other_user.shared / "root-models"
    models.mkdir(mode=0o755)
    result = other_user("models", "fetch", "clip-text", env={"NPUCTL_MODELS": str(models)})
    line = one_line_error(result, 4)
    assert f"cannot write to the model directory {models}" in line
    assert "sudo" in line and "--models-dir" in line
