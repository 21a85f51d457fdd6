"""make bench: every benchmark in turn, each a process of its own (one's memory or threads
never colour the next); the exit status says which verdict the run reached: 0 every target
met, 1 a target missed, 3 no target missed but a benchmark could not run here (its rows say
why). Usage: python -m bench [NAME ...] (default: all, in this order)."""

from __future__ import annotations

import subprocess
import sys

from bench import BENCHES
from bench.report import MET, MISSED, NOT_RUN


def combined(statuses: list[int]) -> int:
    """A missed target (or a benchmark that failed with any other status) outweighs a
    benchmark that could not run."""
    if any(code not in (MET, NOT_RUN) for code in statuses):
        return MISSED
    return NOT_RUN if NOT_RUN in statuses else MET


def main(argv: list[str]) -> int:
    unknown = [name for name in argv if name not in BENCHES]
    if unknown:
        print(f"bench: unknown {', '.join(unknown)}; known: {', '.join(BENCHES)}", file=sys.stderr)
        return 2
    statuses = []
    for name in argv or BENCHES:
        code = subprocess.run([sys.executable, "-m", f"bench.{name}"], check=False).returncode
        statuses.append(code)
        if code not in (MET, NOT_RUN):
            print(f"bench: {name} missed a target (exit {code})", file=sys.stderr)
        elif code == NOT_RUN:
            print(f"bench: {name} could not run every row here (see its rows)", file=sys.stderr)
    return combined(statuses)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
