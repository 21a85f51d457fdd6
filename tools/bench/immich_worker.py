"""Immich's own preprocessing of a photo in a process of its own, as Immich's machine-learning
server runs it: long-lived, asked to transform the same photo again and again. Its CPU is
counted as the measured server's is (the process's, every thread), so the two sides of the
Immich photo verdict are alike: timed in the measuring process instead, the reference moved
by a third between quiet runs with the allocator's state of that process.

Usage (by bench.vision_cost): python -m bench.immich_worker PHOTO; each line N on stdin runs
the transform N times and answers a line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from bench.serve_cost import cpu_seconds
from testkit.immich_photos import immich_transform


class ImmichWorker:
    """The worker process, and its CPU per transform."""

    def __init__(self, photo: Path) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bench.immich_worker", str(photo)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.cpu_per_run(2)  # warm

    def cpu_per_run(self, runs: int) -> float:
        """The worker's CPU seconds per transform, over ``runs`` transforms."""
        assert self.process.stdin is not None and self.process.stdout is not None
        before = cpu_seconds(self.process.pid)
        self.process.stdin.write(f"{runs}\n")
        self.process.stdin.flush()
        if self.process.stdout.readline() != "done\n":
            raise RuntimeError("Immich's preprocessing worker ended")
        return (cpu_seconds(self.process.pid) - before) / runs

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait(timeout=30)

    def __enter__(self) -> ImmichWorker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def main(photo: str) -> int:
    data = Path(photo).read_bytes()
    for line in sys.stdin:
        for _ in range(int(line)):
            immich_transform(data)
        sys.stdout.write("done\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
