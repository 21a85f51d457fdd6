"""QEMU with the Orange Pi 5 Plus machine: Debian's source, the emulator's files copied in as
its setup script does, this project's quilt series, a minimal device set. Cached by every
input, so a second run builds nothing."""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

from pipeline.atomic import write_atomically
from pipeline.errors import BuildError
from pipeline.patching import apply_series
from pipeline.tools import run

from . import sources
from .errors import EmulationError, ExitCode, Stage
from .pins import Pins, digest

BINARY = "qemu-system-aarch64"


def cached_binary(pins: Pins, emulator: Path) -> Path:
    key = digest(pins.qemu, pins.emulator["tree_id"], pins.patches("qemu"))
    return sources.cache() / f"qemu-{key}" / BINARY


# QEMU's configure and ninja build on two cores take some ten minutes; a hang is stopped.
BUILD_TIMEOUT = 3 * 3600


def _run(command: list[str], cwd: Path, log: Path, env: dict[str, str] | None = None) -> None:
    with log.open("a", encoding="utf-8") as output:
        output.write(f"$ {' '.join(command)}\n")
        output.flush()
        result = run(
            command,
            cwd=cwd,
            output=output,
            env=env,
            check=False,
            timeout=BUILD_TIMEOUT,
            failure=f"{command[0]} (log: {log})",
        )
    if result.returncode != 0:
        lines = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()
        raise EmulationError(
            Stage.QEMU_BUILD,
            f"'{command[0]}' exited {result.returncode}: {lines[-1] if lines else ''} (log: {log})",
        )


def build_seconds(binary: Path) -> float | None:
    """How long the cached binary took to build, as recorded beside it (None if unknown)."""
    try:
        return float(json.loads((binary.parent / "build.json").read_text())["seconds"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def build(pins: Pins, emulator: Path, work: Path, jobs: int = os.cpu_count() or 2) -> Path:
    """The qemu-system-aarch64 binary (cached)."""
    binary = cached_binary(pins, emulator)
    if binary.is_file():
        return binary
    started = time.monotonic()
    for tool in ("ninja", "pkg-config", "dpkg-source", "quilt"):
        if shutil.which(tool) is None:
            raise EmulationError(
                Stage.QEMU_BUILD, f"{tool} is not installed: run 'make deps'", ExitCode.INPUT
            )
    log = work / "qemu-build.log"
    work.mkdir(parents=True, exist_ok=True)
    log.write_text("", encoding="utf-8")
    tree = sources.qemu_source(pins, work)
    for source, targets in pins.emulator["qemu_files"].items():
        for target in targets:
            shutil.copyfile(emulator / source, tree / target)
    try:
        apply_series(tree, pins.patches("qemu"))
    except BuildError as error:
        raise EmulationError(Stage.QEMU_BUILD, str(error)) from None
    python = _python_with_meson(pins, work, log)
    build_dir = tree / "build"
    build_dir.mkdir()
    _run(["../configure", f"--python={python}", *pins.qemu["configure"]], build_dir, log)
    _run(["ninja", f"-j{jobs}", BINARY], build_dir, log)
    binary.parent.mkdir(parents=True, exist_ok=True)
    partial = binary.with_name(BINARY + ".partial")
    shutil.copyfile(build_dir / BINARY, partial)
    partial.chmod(0o755)
    write_atomically(
        binary.parent / "build.json",
        json.dumps({"seconds": round(time.monotonic() - started, 1), "jobs": jobs}) + "\n",
    )
    partial.replace(binary)
    shutil.rmtree(tree, ignore_errors=True)
    # One build is kept (about 100 MB): the ones of earlier pins or patches go.
    for earlier in binary.parent.parent.glob("qemu-*"):
        if earlier != binary.parent and earlier.name != "qemu-source":
            shutil.rmtree(earlier, ignore_errors=True)
    return binary


def _python_with_meson(pins: Pins, work: Path, log: Path) -> Path:
    """A virtual environment with the pinned meson (QEMU's configure wants a newer one than
    Debian 12 has)."""
    venv = sources.cache() / "meson-venv"
    python = venv / "bin" / "python3"
    stamp = venv / "meson.pin"
    if stamp.exists() and stamp.read_text() == pins.qemu["meson"]:
        return python
    shutil.rmtree(venv, ignore_errors=True)
    _run([sys.executable, "-m", "venv", str(venv)], work, log)
    _run([str(python), "-m", "pip", "install", "-q", pins.qemu["meson"]], work, log)
    stamp.write_text(pins.qemu["meson"])
    return python
