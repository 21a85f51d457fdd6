"""A build folder that mmdebstrap mounts things inside (the .debs it installs, /proc, /sys,
/dev/pts, /dev/shm), kept safe across interruptions.

A stop (Ctrl-C, SIGTERM from a timeout or a killed 'make bench') ends the build's process
group and unmounts what it mounted; a build killed outright (SIGKILL, a lost machine) leaves
its mounts, and the next build of the same folder finds its owner file, sees that build is
gone, unmounts and removes what it left. A folder with mounts and no owner file of ours is
someone else's: it is refused, never removed (removing a tree with /dev/shm or a .deb
bind-mounted inside would delete the host's files through the mount)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from pipeline import identity
from pipeline.tools import run

from .errors import ExitCode, ImageError

OWNER_FILE = ".build-owner"
OWNER_TAG = f"{identity.NAME} image build"
# How long a stopped build's processes get to finish their own clean-up before SIGKILL.
GRACE_SECONDS = 20


class Abandoned(BaseException):
    """A build given up because another one beside it failed or was stopped."""


class Stopped(BaseException):
    """SIGTERM or SIGHUP, raised where the build is, so its clean-up runs as on Ctrl-C."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def stop_on_signals() -> None:
    """SIGTERM and SIGHUP raise Stopped; SIGINT raises KeyboardInterrupt, also where this
    process was started with SIGINT ignored: a non-interactive shell starts its background
    jobs so ('make test &' in a script), Python keeps that, and such a build went on past a
    Ctrl-C or 'kill -INT' to write its image and exit 0."""

    def stopped(signum: int, _frame: object) -> None:
        raise Stopped(signum)

    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, stopped)
    signal.signal(signal.SIGINT, signal.default_int_handler)


def said_stop(tool: str, stopped: BaseException) -> int:
    """The one line, and the exit status, of a build stopped part-way (Ctrl-C, a signal)."""
    if isinstance(stopped, Stopped):
        print(f"{tool}: stopped by {stopped}; nothing is left mounted", file=sys.stderr)
        return 128 + stopped.signum
    print(f"{tool}: interrupted; nothing is left mounted", file=sys.stderr)
    return 130


def _unescape(field: str) -> str:
    """/proc/self/mounts writes space, tab, newline and backslash as octal escapes."""
    for escaped, plain in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(escaped, plain)
    return field


def mounts_inside(folder: Path) -> list[Path]:
    """Mount points below ``folder``, deepest first (the order they come off in)."""
    prefix = f"{folder.resolve()}/"
    points = []
    for line in Path("/proc/self/mounts").read_text(encoding="utf-8").splitlines():
        fields = line.split(" ")
        if len(fields) > 1 and (point := _unescape(fields[1])).startswith(prefix):
            points.append(Path(point))
    return sorted(set(points), key=lambda point: (len(point.parts), str(point)), reverse=True)


def release(folder: Path) -> None:
    """Unmount everything below ``folder``; lazily, so a process still inside cannot keep a
    mount (it goes with that process)."""
    for point in mounts_inside(folder):
        run(["umount", "--lazy", point], check=False, failure=f"unmounting {point}")
    if left := mounts_inside(folder):
        raise ImageError(
            f"{left[0]} cannot be unmounted: sudo umount --lazy '{left[0]}'", ExitCode.BUILD
        )


def _owner_pid(folder: Path) -> int | None:
    """The pid in our owner file, or None when the file is not ours (or absent)."""
    try:
        tag, pid = (folder / OWNER_FILE).read_text(encoding="utf-8").split("\n")[:2]
    except (OSError, ValueError):
        return None
    return int(pid) if tag == OWNER_TAG and pid.isdigit() else None


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def claim(folder: Path) -> None:
    """An empty ``folder`` owned by this process; what an earlier build of ours left there,
    mounts included, is taken away first."""
    if mounts_inside(folder):
        owner = _owner_pid(folder)
        if owner is None:
            raise ImageError(
                f"{folder} has mounts inside that no build of this project made: "
                "unmount them first",
                ExitCode.BUILD,
            )
        if owner != os.getpid() and _running(owner):
            raise ImageError(
                f"{folder} is in use by another build (pid {owner}): wait for it or stop it",
                ExitCode.BUILD,
            )
        release(folder)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    (folder / OWNER_FILE).write_text(f"{OWNER_TAG}\n{os.getpid()}\n", encoding="utf-8")


@contextmanager
def owned(folder: Path) -> Iterator[Path]:
    """``claim`` the folder; whatever way the build ends, nothing stays mounted inside."""
    claim(folder)
    try:
        yield folder
    finally:
        release(folder)


_running_groups: set[subprocess.Popen] = set()
_groups_lock = threading.Lock()
_abandoning = threading.Event()


def run_group(command: Sequence[str], **options: Any) -> int:
    """Run ``command`` in a process group of its own; if this process is stopped meanwhile,
    the whole group is asked to stop (SIGTERM, so mmdebstrap cleans up), then killed. After
    ``abandon_groups`` none starts."""
    with _groups_lock:
        if _abandoning.is_set():
            raise Abandoned()
        process = subprocess.Popen(command, start_new_session=True, **options)
        _running_groups.add(process)
    try:
        return process.wait()
    except BaseException:
        _end_group(process)
        raise
    finally:
        with _groups_lock:
            _running_groups.discard(process)


def abandon_groups() -> None:
    """For builds running in other threads, which a signal cannot reach: end every group
    they run, so each thread's clean-up (its mounts) runs, and start no other."""
    with _groups_lock:
        _abandoning.set()
        running = list(_running_groups)
    for process in running:
        _end_group(process)


def _end_group(process: subprocess.Popen) -> None:
    with suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    with suppress(subprocess.TimeoutExpired):
        process.wait(GRACE_SECONDS)
    with suppress(ProcessLookupError):  # what is left of the group, the leader gone or not
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()
