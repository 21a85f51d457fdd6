"""Boot the emulated board once: the cached root file system plus the host's cases and the
later Teflons' .debs as a second initramfs archive, user-mode networking with npuctl serve's
ports forwarded to the host, the console kept in a log and every NPU job's register commands
in another (the NPU model's regcmd-log). While the guest serves, the host's requests run
(``while_serving``); a line on the console then lets the guest finish."""

from __future__ import annotations

import contextlib
import itertools
import json
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.tools import run

from .errors import EmulationError, Stage
from .guest_root import GuestRoot
from .pins import Pins

READY = "LAB: serve ready"
RESULT = "LAB-RESULT "
PHASE = "LAB: phase "  # the guest's jobs say so as each of their parts starts
REQUESTS_DONE = "host: requests done"  # the host's own mark among the guest's
FIRST_PHASE = "kernel and init"
# Marks that start a part of the boot, and its name (the guest's own phases name theirs).
PHASE_STARTS = (
    ("LAB: booted", "devices: udev's coldplug, rocket's probe"),
    (READY, "the host's requests"),
    (REQUESTS_DONE, "serve's stop, dmesg, power off"),
)


@dataclass
class Run:
    console: str
    seconds: float
    regcmd_log: Path | None = None  # every NPU job's register commands (registers.py reads it)
    served: Any = None  # what while_serving returned
    host: dict[str, Any] = field(default_factory=dict)  # the host's answers to compare with
    serve_error: str = ""
    debs_sent: dict[str, str] = field(default_factory=dict)  # package -> version
    results: list[tuple[str, dict]] = field(default_factory=list)
    # When each of the guest's "LAB" lines reached the host, in the host's seconds since
    # QEMU started (the guest's own clock counts instructions), and the line.
    marks: list[tuple[float, str]] = field(default_factory=list)

    def first(self, kind: str) -> dict | None:
        return next((document for name, document in self.results if name == kind), None)

    def all(self, kind: str) -> list[dict]:
        return [document for name, document in self.results if name == kind]

    def under(self, kind: str, teflon: str) -> list[dict]:
        """The results of that kind the guest reported while that Teflon was installed."""
        return [document for document in self.all(kind) if document.get("teflon") == teflon]

    @property
    def dmesg(self) -> str:
        start, end = self.console.find("LAB: dmesg begin"), self.console.find("LAB: dmesg end")
        return self.console[start : end if end > start else None] if start >= 0 else ""


GUEST_FILES = Path(__file__).resolve().parent / "guest"


@dataclass(frozen=True)
class Teflon:
    """A Teflon the board runs the cases under: its version, and the .debs that install it
    over the one before (none for the first, which the cached root holds)."""

    version: str
    debs: tuple[Path, ...] = ()


def lab_archive(cases: Path, debs: list[Path], teflons: list[Teflon], target: Path) -> Path:
    """/lab of the guest, beside the cached root file system: its init and jobs, the models
    and cases.json the host wrote (/lab/cases), the .debs it installs (/lab/debs) and the
    Teflons in turn (/lab/teflons.json, each one's .debs in /lab/teflons/N)."""
    with tempfile.TemporaryDirectory() as scratch:
        lab = Path(scratch) / "lab"
        shutil.copytree(GUEST_FILES, lab)
        shutil.copytree(cases, lab / "cases")
        (lab / "debs").mkdir()
        for deb in debs:
            shutil.copyfile(deb, lab / "debs" / deb.name)
        listed = []
        for number, teflon in enumerate(teflons):
            folder = lab / "teflons" / str(number)
            folder.mkdir(parents=True)
            for deb in teflon.debs:
                shutil.copyfile(deb, folder / deb.name)
            listed.append(
                {
                    "version": teflon.version,
                    "debs": [f"/lab/teflons/{number}/{deb.name}" for deb in teflon.debs],
                }
            )
        (lab / "teflons.json").write_text(json.dumps(listed), encoding="utf-8")
        run(
            [
                "sh",
                "-c",
                f"cd '{scratch}' && find lab | LC_ALL=C sort "
                f"| cpio -o -H newc --quiet > '{target}'",
            ],
            failure="packing the board's test files",
        )
    return target


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass(frozen=True)
class Forwarded:
    """The host's ports of the guest's npuctl serve: HTTP, and Frigate's ZeroMQ detector."""

    http: int
    zmq: int


def command(
    pins: Pins, qemu: Path, guest: GuestRoot, initrd: Path, ports: Forwarded, regcmd_log: Path
) -> list[str]:
    machine = pins.machine
    forwards = (
        f"hostfwd=tcp:127.0.0.1:{ports.http}-:{machine['serve_port']},"
        f"hostfwd=tcp:127.0.0.1:{ports.zmq}-:{machine['zmq_port']}"
    )
    return [
        str(qemu),
        "-M", machine["name"],
        "-m", str(machine["memory_mb"]),
        *machine["options"],
        "-nographic",
        "-no-reboot",
        "-kernel", str(guest.kernel),
        "-initrd", str(initrd),
        "-append", f"{machine['append']} rdinit=/lab/init",
        "-netdev", f"user,id=net0,{forwards}",
        "-device", "virtio-net-device,netdev=net0",
        "-global", f"rockchip-npu.regcmd-log={regcmd_log}",
    ]  # fmt: skip


def _initrd(
    guest: GuestRoot, cases: Path, debs: list[Path], teflons: list[Teflon], work: Path
) -> Path:
    """The guest's root file system, then the lab's files (cases, .debs) after it."""
    work.mkdir(parents=True, exist_ok=True)
    initrd = work / "initrd.cpio"
    archive = lab_archive(cases, debs, teflons, work / "lab.cpio")
    with initrd.open("wb") as out:
        for part in (guest.initrd, archive):
            with part.open("rb") as source:
                shutil.copyfileobj(source, out, 1 << 20)
    return initrd


def phases(marks: list[tuple[float, str]], total: float) -> dict[str, float]:
    """Host seconds of each part of the boot, in order: each from the mark that starts it
    (PHASE_STARTS, the guest's "LAB: phase" lines) to the next one's, the last to the end."""
    starts: list[tuple[float, str]] = [(0.0, FIRST_PHASE)]
    for seconds, line in marks:
        if line.startswith(PHASE):
            starts.append((seconds, line[len(PHASE) :].strip()))
        for mark, name in PHASE_STARTS:
            if line.startswith(mark):
                starts.append((seconds, name))
    ends = [seconds for seconds, _ in starts[1:]] + [total]
    return {name: round(end - start, 1) for (start, name), end in zip(starts, ends, strict=True)}


def case_seconds(marks: list[tuple[float, str]]) -> dict[tuple[str, str], float]:
    """Host seconds of each case under each Teflon, from the mark before its result to its
    result, by (Teflon, case)."""
    found = {}
    for (before, _), (at, line) in itertools.pairwise(marks):
        if line.startswith(RESULT + "case "):
            with contextlib.suppress(ValueError, KeyError, TypeError):
                case = json.loads(line.split(" ", 2)[2])
                found[(case.get("teflon", ""), case["name"])] = round(at - before, 1)
    return found


def results(console: str) -> list[tuple[str, Any]]:
    """What the guest's jobs reported: one RESULT line each, a kind and a JSON document."""
    found = []
    for line in console.splitlines():
        line = line.strip()
        if line.startswith(RESULT):
            kind, _, text = line[len(RESULT) :].partition(" ")
            try:
                found.append((kind, json.loads(text)))
            except ValueError:
                continue
    return found


def boot(
    pins: Pins,
    qemu: Path,
    guest: GuestRoot,
    cases: Path,
    debs: list[Path],
    teflons: list[Teflon],
    work: Path,
    while_serving: Callable[[Forwarded], Any],
    timeout: float = 1800,
    cancelled: threading.Event | None = None,
) -> Run:
    """One boot of the board: every job the guest runs, and ``while_serving``'s answer
    while npuctl serve listens. ``cancelled`` (set by whoever waits no longer) ends QEMU."""
    initrd = _initrd(guest, cases, debs, teflons, work)
    ports = Forwarded(free_port(), free_port())
    log = work / "console.log"
    regcmd_log = work / "regcmds.log"
    regcmd_log.unlink(missing_ok=True)
    lines: list[str] = []
    ready = threading.Event()
    started = time.monotonic()
    process = subprocess.Popen(
        command(pins, qemu, guest, initrd, ports, regcmd_log),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
    )

    def read() -> None:
        assert process.stdout is not None
        with log.open("w", encoding="utf-8") as kept:
            for line in process.stdout:
                kept.write(line)
                kept.flush()
                lines.append(line)
                if line.startswith("LAB"):
                    run.marks.append((round(time.monotonic() - started, 1), line.strip()))
                if line.startswith(READY):
                    ready.set()

    run = Run(
        "",
        0.0,
        regcmd_log=regcmd_log,
        debs_sent={deb.name.split("_")[0]: deb.name.split("_")[1] for deb in debs},
    )
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    deadline = started + timeout
    stop = cancelled or threading.Event()
    while (
        process.poll() is None
        and not ready.is_set()
        and not stop.is_set()
        and time.monotonic() < deadline
    ):
        ready.wait(1)
    if ready.is_set() and not stop.is_set():
        try:
            run.served = while_serving(ports)
        except Exception as error:  # the guest must finish either way; the test says why
            run.serve_error = f"{type(error).__name__}: {error}"
        run.marks.append((round(time.monotonic() - started, 1), REQUESTS_DONE))
        assert process.stdin is not None
        process.stdin.write("done\n")
        process.stdin.flush()
    while process.poll() is None and not stop.is_set() and time.monotonic() < deadline:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=1)
    if process.poll() is None:
        process.kill()
        process.wait()
        lines.append("LAB: cancelled\n" if stop.is_set() else "LAB: timeout\n")
    reader.join(timeout=30)
    run.console = "".join(lines)
    run.seconds = round(time.monotonic() - started, 1)
    run.results += results(run.console)
    if "LAB: booted" not in run.console:
        raise EmulationError(Stage.BOOT, f"the kernel did not start /lab/init (console: {log})")
    return run
