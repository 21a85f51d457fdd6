"""Runs a command beside a CPU-heavy job: one busy process per core of this machine, for as
long as the command runs. 'make bench-busy' uses it to show that the benchmarks' verdicts do
not depend on what else the machine runs. Usage: python -m bench.neighbour COMMAND..."""

from __future__ import annotations

import os
import subprocess
import sys

SPIN = "while True: pass"


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m bench.neighbour COMMAND...", file=sys.stderr)
        return 2
    spinners = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(os.cpu_count() or 1)]
    print(f"neighbour: {len(spinners)} busy processes beside '{' '.join(argv)}'", flush=True)
    try:
        return subprocess.call(argv)
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
