"""Where npuctl serve's threads run (--cpu)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from npuctl.errors import ExitCode, NpuctlError
from npuctl.serve import affinity
from npuctl.serve.protocol import PREPARE_INLINE
from testkit.serve_process import start

from .conftest import Board

T = TypeVar("T")


def fake_cpus(tmp_path: Path, capacities: dict[int, int | None]) -> Path:
    for cpu, capacity in capacities.items():
        folder = tmp_path / f"cpu{cpu}"
        folder.mkdir(parents=True)
        if capacity is not None:
            (folder / "cpu_capacity").write_text(f"{capacity}\n")
    return tmp_path


def test_auto_takes_the_fastest_core_and_not_cpu0_among_equals(tmp_path: Path) -> None:
    # RK3588: four Cortex-A55 (capacity 530) and four Cortex-A76 (1024)
    big_little = fake_cpus(tmp_path / "rk3588", {n: 530 if n < 4 else 1024 for n in range(8)})
    assert affinity.choose("auto", set(range(8)), big_little) == 7
    assert affinity.choose("auto", {0, 1, 2, 5}, big_little) == 5  # what systemd allows
    same = fake_cpus(tmp_path / "x86", {0: None, 1: None})  # no cpu_capacity: all equal
    assert affinity.choose("auto", {0, 1}, same) == 1
    assert affinity.choose("auto", {3}, same) is None  # nothing to choose
    assert affinity.choose("all", {0, 1}, same) is None
    assert affinity.choose("0", {0, 1}, same) == 0


@pytest.mark.parametrize("setting", ["9", "fast", "-1"])
def test_a_cpu_the_process_may_not_use_is_refused(setting: str) -> None:
    with pytest.raises(NpuctlError) as refused:
        affinity.choose(setting, {0, 1, 2, 3, 6}, Path("/nonexistent"))
    assert refused.value.code == ExitCode.USAGE
    assert "0-3,6" in str(refused.value)


def test_a_refused_pin_leaves_the_threads_where_they_are(monkeypatch) -> None:
    """The packaged unit lets sched_setaffinity through its seccomp filter with EPERM for
    anything refused; should that ever change, serve goes on unpinned and says so."""

    def refused(pid: int, cpus: set[int]) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setattr(os, "sched_setaffinity", refused)
    placement = affinity.pin("1")
    assert placement.startswith("threads on CPUs 0-1 (keeping them on CPU 1 failed:")


def test_a_refused_policy_leaves_the_thread_as_it_was(monkeypatch) -> None:
    """SCHED_BATCH refused (a seccomp filter without sched_setscheduler): serving goes on."""

    def refused(pid: int, policy: int, parameters: object) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "sched_setscheduler", refused)
    affinity.wait_for_the_holder()


def per_thread(pid: int, read: Callable[[Path], T]) -> dict[int, T]:
    """``read`` of each thread's /proc folder, by thread id; a thread that ended meanwhile is
    left out."""
    found = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            found[int(task.name)] = read(task)
    return found


def policies_of_threads(pid: int) -> dict[int, int]:
    return per_thread(pid, lambda task: os.sched_getscheduler(int(task.name)))


def names_of_threads(pid: int) -> dict[int, str]:
    return per_thread(pid, lambda task: (task / "comm").read_text().strip())


def test_the_event_loop_and_the_npu_owner_preempt_on_waking(clip_board: Board) -> None:
    """The event loop keeps the default policy (a request arriving wakes it at once), and so
    does the NPU owner (the NPU's answer wakes it at once, to hand the device its next
    job). The thread that wakes the loop for finished work, and a request thread, which
    hands work over, are SCHED_BATCH."""
    server = start(clip_board.env)
    try:
        pid = server.process.pid
        answer = server.request("POST", "/v1/embeddings", json.dumps({"input": "a"}).encode())
        assert answer.status == 200  # a short text: the event loop hands it to the owner
        before, names = policies_of_threads(pid), names_of_threads(pid)
        by_name = {names.get(tid): policy for tid, policy in before.items()}
        assert before[pid] == os.SCHED_OTHER
        assert by_name["npu-owner-0"] == os.SCHED_OTHER, by_name
        assert by_name["npu-waker"] == os.SCHED_BATCH, by_name
        long_texts = {"input": ["a red car on the beach " * 40] * 20, "truncate": True}
        texts = json.dumps(long_texts).encode()
        assert len(texts) > PREPARE_INLINE  # parsed on a request thread
        answer = server.request("POST", "/v1/embeddings", texts)
        assert answer.status == 200, answer.body
        started = policies_of_threads(pid)
        new = {tid: policy for tid, policy in started.items() if tid not in before}
        assert new and set(new.values()) == {os.SCHED_BATCH}, (before, started)
    finally:
        assert server.stop() == 0


def cpus_of_threads(pid: int) -> dict[int, str]:
    def allowed(task: Path) -> str:
        status = (task / "status").read_text()
        line = next(line for line in status.splitlines() if line.startswith("Cpus_allowed_list"))
        return line.split()[1]

    return per_thread(pid, allowed)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to choose from")
def test_the_server_threads_share_one_cpu_unless_told_otherwise(clip_board: Board) -> None:
    wanted = max(os.sched_getaffinity(0))
    server = start(clip_board.env, "--cpu", str(wanted))
    try:
        assert server.embed({"input": "on one core"}).status == 200
        connection = server.connection()
        assert server.request("GET", "/health", connection=connection).status == 200
        threads = cpus_of_threads(server.process.pid)
        # main (the event loop), the loader, the NPU owner, a request thread; a BLAS pool
        # started at import (before the choice) may keep the whole set
        assert list(threads.values()).count(str(wanted)) >= 4, threads
        assert threads[server.process.pid] == str(wanted)
        assert f"threads on CPU {wanted}" in server.stderr
        connection.close()
    finally:
        assert server.stop() == 0
    spread = start(clip_board.env, "--cpu", "all")
    try:
        assert spread.embed({"input": "anywhere"}).status == 200
        assert str(wanted) not in cpus_of_threads(spread.process.pid).values()
    finally:
        assert spread.stop() == 0


def test_an_unusable_cpu_is_one_line_and_exit_2(clip_board: Board) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "npuctl", "serve", "--port", "0", "--cpu", "4096"],
        capture_output=True,
        text=True,
        env=clip_board.env,
        timeout=120,
    )
    assert done.returncode == ExitCode.USAGE
    assert done.stderr.count("\n") == 1, done.stderr
    assert "--cpu 4096: not a CPU this process may use" in done.stderr
