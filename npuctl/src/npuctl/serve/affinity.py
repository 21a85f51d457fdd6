"""Which CPU the server's threads share.

Every request is handed from its connection's thread to the NPU owner and back. Between two
cores each hand-over wakes an idle core (an inter-processor interrupt, and on a virtual
machine an exit to the host): tens of microseconds, more than the rest of the server's work
for a text. On one core a hand-over is a context switch of a few microseconds. One core costs
the server little: Python runs one thread at a time anyway, and the NPU owner spends its time
waiting for the device, not on the CPU."""

from __future__ import annotations

import contextlib
import itertools
import os
import threading
from pathlib import Path

from ..errors import ExitCode, NpuctlError

CPU_SYSFS = Path("/sys/devices/system/cpu")


def choose(setting: str, allowed: set[int], sysfs: Path = CPU_SYSFS) -> int | None:
    """The CPU for ``--cpu``: a number, ``auto`` (the fastest core this process may use) or
    ``all`` (None: leave the threads to the scheduler)."""
    if setting == "all" or (setting == "auto" and len(allowed) < 2):
        return None
    if setting == "auto":
        # cpu_capacity ranks big and little cores (1024 for the biggest); without it all are
        # equal. Among equals the last: CPU 0 takes most interrupts.
        return max(allowed, key=lambda cpu: (_capacity(sysfs, cpu), cpu))
    try:
        cpu = int(setting)
    except ValueError:
        cpu = -1
    if cpu not in allowed:
        raise NpuctlError(
            f"--cpu {setting}: not a CPU this process may use ({_ranges(allowed)}); give one "
            "of them, auto or all",
            ExitCode.USAGE,
        )
    return cpu


def pin(setting: str) -> str:
    """Keep this thread, and every thread it starts later, on the chosen CPU; what was done,
    for the log."""
    allowed = os.sched_getaffinity(0)
    cpu = choose(setting, allowed)
    if cpu is None:
        return f"threads on CPUs {_ranges(allowed)}"
    try:
        os.sched_setaffinity(0, {cpu})  # this thread only; threads started later inherit it
    except OSError as error:  # a seccomp filter or a cpuset changed under us: serve anyway
        return f"threads on CPUs {_ranges(allowed)} (keeping them on CPU {cpu} failed: {error})"
    return f"threads on CPU {cpu}; --cpu all spreads them"


def wait_for_the_holder() -> None:
    """Let this thread, once woken, wait for the running thread's turn to end instead of
    preempting it (SCHED_BATCH, at the same nice value; no privilege needed). A Python
    thread woken by a hand-over can do nothing until it holds the interpreter lock, which
    the thread that woke it still holds: preempting it only buys two context switches. The
    request threads take it; the NPU owners do not (see NpuOwner._run)."""
    # A seccomp filter, or not Linux: the default policy stays.
    with contextlib.suppress(OSError, AttributeError):
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))


def name_thread(name: str) -> None:
    """This thread's name as top -H, ps -L and /proc show it (Linux keeps 15 bytes)."""
    with contextlib.suppress(OSError):  # not Linux, or /proc not mounted: unnamed
        Path(f"/proc/self/task/{threading.get_native_id()}/comm").write_text(name[:15])


def _capacity(sysfs: Path, cpu: int) -> int:
    try:
        return int((sysfs / f"cpu{cpu}" / "cpu_capacity").read_text())
    except (OSError, ValueError):
        return 0


def _ranges(cpus: set[int]) -> str:
    """0-3,6 for {0, 1, 2, 3, 6}."""
    parts = []
    for _, run in itertools.groupby(enumerate(sorted(cpus)), lambda pair: pair[1] - pair[0]):
        members = [cpu for _, cpu in run]
        parts.append(str(members[0]) if len(members) == 1 else f"{members[0]}-{members[-1]}")
    return ",".join(parts)
