"""The benchmark verdicts' machinery: paired rounds give a ratio a disturbed round cannot
swing, instruction counts come from callgrind, and the tables in docs/ are made from the JSON
reports of both runs."""

import json
import shutil
import sys
import time

import pytest

from bench.paired import Paired, instructions, interleaved
from bench.report import SCHEMA, write_report
from bench.tables import render


def test_a_disturbed_round_moves_one_ratio_not_the_verdict():
    # Both sides three times slower in rounds 2-3 (a neighbour's burst): the ratio holds.
    paired = Paired([1.0, 3.0, 3.0, 1.0, 1.0], [2.0, 6.0, 6.0, 2.0, 2.0])
    assert paired.speedup == 2.0
    # Medians of each side apart would not see the pairing.
    lopsided = Paired([1.0, 1.0, 3.0, 3.0, 3.0], [6.0, 6.0, 2.0, 2.0, 2.0])
    assert lopsided.speedup == pytest.approx(2 / 3)


def test_interleaved_alternates_who_goes_first():
    order = []
    paired = interleaved(
        lambda: order.append("ours"), lambda: order.append("reference"), 4, warmup=0
    )
    assert order == ["ours", "reference", "reference", "ours"] * 2
    assert len(paired.ours) == len(paired.reference) == 4


def test_interleaved_measures_each_side():
    paired = interleaved(lambda: time.sleep(0.002), lambda: time.sleep(0.02), 3, warmup=0)
    assert paired.speedup > 2
    assert paired.reference_ms > paired.ours_ms


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind: run 'make deps'")
def test_instruction_counts_are_stable_and_ordered():
    small = instructions([sys.executable, "-S", "-c", "pass"])
    again = instructions([sys.executable, "-S", "-c", "pass"])
    large = instructions([sys.executable, "-S", "-c", "sum(range(3_000_000))"])
    assert abs(small - again) / small < 0.02
    assert large > small * 2


def row(name, ok, ratio=1.5):
    return {
        "name": name,
        "unit": "ms",
        "ours": 1.0,
        "reference": 1.5,
        "ratio": ratio,
        "target": "reference/ours >= 1.2",
        "ok": ok,
    }


def test_the_tables_show_both_runs_from_the_reports(tmp_path, monkeypatch):
    for run, ok in (("quiet", True), ("busy", False)):
        monkeypatch.setenv("BENCH_REPORT_DIR", str(tmp_path / run))
        monkeypatch.setenv("BENCH_CONDITIONS", f"{run} conditions")
        path = write_report([row("tokenizer", True), row("overhead", ok, 1.1)], "host-cost")
        document = json.loads(path.read_text())
        assert document["schema"] == SCHEMA and oct(path.stat().st_mode)[-3:] == "644"
    text = render(tmp_path / "quiet", tmp_path / "busy")
    lines = [line for line in text.splitlines() if line.startswith("| overhead")]
    assert len(lines) == 1
    assert "1.10x ok" in lines[0] and "1.10x **MISSED**" in lines[0]
    assert "quiet conditions" in text and "busy conditions" in text
    assert "Not run yet: serve-cost, watch-quality, vision-cost, image-size." in text
