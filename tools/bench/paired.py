"""Measurements whose verdict does not depend on what else the machine runs: a ratio against
a reference timed in the same rounds (interleaved, the order alternating), or an instruction
count under valgrind's callgrind. Absolute times are printed beside them as information."""

from __future__ import annotations

import os
import re
import shutil
import statistics
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass

COLLECTED = re.compile(r"Collected\s*:\s*(\d+)")


@dataclass(frozen=True)
class Paired:
    """Seconds per round of each side; the ratio is the median of the per-round ratios, so
    a disturbed round moves one ratio, not a whole side."""

    ours: list[float]
    reference: list[float]

    def ms(self, side: list[float]) -> float:
        return statistics.median(side) * 1000

    @property
    def ours_ms(self) -> float:
        return self.ms(self.ours)

    @property
    def reference_ms(self) -> float:
        return self.ms(self.reference)

    @property
    def speedup(self) -> float:
        """How many times faster ours is than the reference (reference / ours)."""
        return statistics.median(r / o for o, r in zip(self.ours, self.reference, strict=True))


def interleaved(
    ours: Callable[[], object],
    reference: Callable[[], object],
    rounds: int,
    warmup: int = 2,
    ours_per_round: int = 1,
    reference_per_round: int = 1,
) -> Paired:
    """Each round times ours and the reference back to back, which goes first alternating;
    a side called several times a round counts its median call."""

    def timed(action: Callable[[], object], times: int) -> float:
        samples = []
        for _ in range(times):
            started = time.perf_counter()
            action()
            samples.append(time.perf_counter() - started)
        return statistics.median(samples)

    for _ in range(warmup):
        ours()
        reference()
    found = Paired([], [])
    for round_number in range(rounds):
        if round_number % 2:
            found.reference.append(timed(reference, reference_per_round))
            found.ours.append(timed(ours, ours_per_round))
        else:
            found.ours.append(timed(ours, ours_per_round))
            found.reference.append(timed(reference, reference_per_round))
    return found


def alternating(
    ours: Callable[[], float], reference: Callable[[], float], rounds: int
) -> tuple[list[float], list[float]]:
    """Each side's own measure (CPU seconds, say) per round, the two back to back, which goes
    first alternating; the ratio a verdict takes is the median of the per-round ratios."""
    found: tuple[list[float], list[float]] = ([], [])
    for round_number in range(rounds):
        if round_number % 2:
            found[1].append(reference())
            found[0].append(ours())
        else:
            found[0].append(ours())
            found[1].append(reference())
    return found


class NoCounter(RuntimeError):
    pass


def instructions(command: list[str], env: dict[str, str] | None = None) -> int:
    """Instructions a whole process executes (valgrind --tool=callgrind): the same count
    however busy the machine is."""
    if shutil.which("valgrind") is None:
        raise NoCounter("valgrind is not installed: run 'make deps'")
    # Once uncounted, to write the bytecode caches an installation has (pip and dpkg compile
    # them) and a fresh checkout lacks, whatever PYTHONDONTWRITEBYTECODE says here: otherwise
    # the count would include compiling the program.
    warm = dict(os.environ if env is None else env)
    warm.pop("PYTHONDONTWRITEBYTECODE", None)
    subprocess.run(command, capture_output=True, check=False, env=warm)
    result = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *command],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    found = COLLECTED.search(result.stderr)
    if result.returncode != 0 or found is None:
        raise NoCounter(f"callgrind could not count {command}: {result.stderr[-500:]}")
    return int(found.group(1))
