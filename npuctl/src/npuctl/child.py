"""Running a piece of npuctl in a child process: libnoe can segfault or hang, and either must
become a clear message, never take npuctl down. The child prints one JSON object as its
last line starting with "{"."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class ChildResult:
    answer: dict | None  # the child's JSON answer; None when there is none
    problem: str = ""  # what went wrong when there is no answer, as the end of a sentence
    started: bool = True  # False: the process could not even be started
    stderr: str = ""  # what the child printed there (vendor libraries report failures there)


def run_module(
    module: str, args: list[str], timeout: float, python: str | None = None
) -> ChildResult:
    """``python -m module args...`` with the running interpreter (or ``python``)."""
    try:
        result = subprocess.run(
            [python or sys.executable, "-m", module, *args],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return ChildResult(None, f"did not finish in {timeout:.0f} s (hung)")
    except OSError as error:  # exec format error, ENOMEM, EAGAIN, a vanished interpreter
        reason = error.strerror or type(error).__name__
        return ChildResult(
            None, f"could not start a child process ({sys.executable}: {reason})", started=False
        )
    if result.returncode < 0:
        try:
            name = signal.Signals(-result.returncode).name
        except ValueError:
            name = f"signal {-result.returncode}"
        return ChildResult(None, f"crashed ({name})", stderr=result.stderr)
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    if lines:
        try:
            return ChildResult(json.loads(lines[-1]), stderr=result.stderr)
        except ValueError:
            pass
    last = (result.stderr.strip().splitlines() or [f"no answer (exit {result.returncode})"])[-1]
    return ChildResult(None, last[-300:], stderr=result.stderr)
