"""How much CPU time the host took from this (virtual) machine while a measurement ran.

On a virtual machine the hypervisor may run other guests on the cores this one wants; the
kernel counts that time as "steal" in /proc/stat. A latency measured while the host stole
a share of the CPU measures the host, so the benches with a target in milliseconds repeat a
disturbed attempt and keep the least disturbed one, printing every attempt. On bare metal
steal stays zero and the first attempt is kept."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

ATTEMPTS = 3
QUIET = 0.01  # below this share of the CPU time stolen, an attempt is undisturbed

Result = TypeVar("Result")


def cpu_jiffies(stat: Path = Path("/proc/stat")) -> tuple[int, int]:
    """(stolen, total) CPU time of all CPUs so far, in jiffies; (0, 0) where not counted."""
    try:
        fields = [int(value) for value in stat.read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return 0, 0
    # user nice system idle iowait irq softirq steal [guest guest_nice: inside user already]
    return (fields[7] if len(fields) > 7 else 0), sum(fields[:8])


def stolen_share(measure: Callable[[], Result]) -> tuple[Result, float]:
    """The measurement's result and the share of CPU time the host took while it ran."""
    stolen_before, total_before = cpu_jiffies()
    result = measure()
    stolen_after, total_after = cpu_jiffies()
    elapsed = total_after - total_before
    return result, (stolen_after - stolen_before) / elapsed if elapsed > 0 else 0.0


def least_disturbed(
    measure: Callable[[], Result],
    describe: Callable[[Result], str],
    what: str,
    timed: Callable[[Callable[[], Result]], tuple[Result, float]] = stolen_share,
) -> Result:
    """Up to ATTEMPTS runs of ``measure``, stopping at the first undisturbed one; the run
    with the least steal. Every attempt is printed, so nothing is hidden."""
    attempts: list[tuple[float, Result]] = []
    for attempt in range(1, ATTEMPTS + 1):
        result, share = timed(measure)
        print(
            f"{what}, attempt {attempt}: {describe(result)}; the host took {share:.1%} of "
            "this machine's CPU time meanwhile"
        )
        attempts.append((share, result))
        if share < QUIET:
            break
    return min(attempts, key=lambda pair: pair[0])[1]
