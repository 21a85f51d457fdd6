"""A command run beside the tests that leave a core idle.

The suite's first part keeps both cores busy (servers with their clients, QEMU beside the
tests); its last part builds and checks packages (dpkg-buildpackage, lintian, piuparts,
apt in chroots), one process at a time. ``--beside-idle-core COMMAND`` starts COMMAND
(``make test`` passes npuctl's runs on the oldest dependencies and without root) when the
first test marked ``leaves_a_core_idle`` starts, or when the session ends if none runs;
its output goes to a log, shown whole when the session ends; the session fails if it fails.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

MARKER = "leaves_a_core_idle"


class Beside:
    def __init__(self, command: str) -> None:
        self.command = command
        self.process: subprocess.Popen[bytes] | None = None
        descriptor, log = tempfile.mkstemp(prefix="beside-", suffix=".log")
        os.close(descriptor)  # reopened by start(), which writes it
        self.log = Path(log)

    def start(self) -> None:
        if self.process is not None:
            return
        with self.log.open("wb") as output:
            self.process = subprocess.Popen(
                shlex.split(self.command),
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # stopped as a whole if the session is interrupted
            )

    def finish(self, interrupted: bool) -> int:
        """Its exit status, once it has ended (stopped first when the tests were)."""
        self.start()
        assert self.process is not None
        if interrupted and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
        code = self.process.wait()
        sys.stdout.write(f"\n{'=' * 20} beside the tests: {self.command} {'=' * 20}\n")
        sys.stdout.write(self.log.read_text(errors="replace"))
        sys.stdout.write(f"{'=' * 20} exit {code} {'=' * 20}\n")
        sys.stdout.flush()
        self.log.unlink(missing_ok=True)
        return code


def last(items: list[pytest.Item]) -> None:
    """The tests that leave a core idle run last, in their order: the command beside them
    has that core from then on."""
    items.sort(key=lambda item: item.get_closest_marker(MARKER) is not None)
