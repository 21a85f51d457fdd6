"""The benches' guard against a busy host, for rows with a target in milliseconds: steal
read from /proc/stat, a disturbed attempt repeated, the least disturbed one kept, and every
attempt printed."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.host_steal import ATTEMPTS, cpu_jiffies, least_disturbed


def test_steal_and_total_come_from_the_first_line(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    stat.write_text("cpu  100 5 50 1000 10 1 2 30 7 0\ncpu0 50 2 25 500 5 0 1 15 3 0\n")
    # guest time is inside user time already: not added twice
    assert cpu_jiffies(stat) == (30, 100 + 5 + 50 + 1000 + 10 + 1 + 2 + 30)


def test_no_steal_column_or_no_file_counts_as_none(tmp_path: Path) -> None:
    old = tmp_path / "old"
    old.write_text("cpu  100 5 50 1000\n")
    assert cpu_jiffies(old) == (0, 1155)
    assert cpu_jiffies(tmp_path / "missing") == (0, 0)


def scripted(shares: list[float]):
    """A steal meter that reports these shares, one per attempt."""
    remaining = iter(shares)

    def timed(measure):
        return measure(), next(remaining)

    return timed


def test_a_quiet_first_attempt_is_kept_without_repeating(
    capsys: pytest.CaptureFixture[str],
) -> None:
    runs = iter(range(1, 10))
    kept = least_disturbed(lambda: next(runs), str, "thing", scripted([0.002]))
    assert kept == 1
    assert capsys.readouterr().out == (
        "thing, attempt 1: 1; the host took 0.2% of this machine's CPU time meanwhile\n"
    )


def test_disturbed_attempts_are_repeated_and_the_least_disturbed_kept(
    capsys: pytest.CaptureFixture[str],
) -> None:
    runs = iter(range(1, 10))
    kept = least_disturbed(lambda: next(runs), str, "thing", scripted([0.2, 0.05, 0.1]))
    assert kept == 2
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == ATTEMPTS == 3
    assert [line.split(":")[0] for line in lines] == [
        "thing, attempt 1",
        "thing, attempt 2",
        "thing, attempt 3",
    ]
    assert "20.0%" in lines[0] and "5.0%" in lines[1] and "10.0%" in lines[2]
