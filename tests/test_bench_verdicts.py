"""The benchmark verdicts' machinery: paired rounds give a ratio a disturbed round cannot
swing, instruction counts come from callgrind, and the tables in docs/ are made from the JSON
reports of both runs."""

import json
import shutil
import sys
import time

import pytest

from bench import BENCHES
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


def test_a_fresh_checkout_counts_as_a_run_after_it(tmp_path):
    """The bytecode a fresh checkout has not compiled yet is not counted: the first count
    of a program whose module has no cache is the count of every later run."""
    module = tmp_path / "fresh_module.py"
    module.write_text("".join(f"def f{n}(x):\n    return x + {n}\n" for n in range(3000)))
    command = [
        sys.executable,
        "-S",
        "-c",
        f"import sys; sys.path[:0] = [{str(tmp_path)!r}]; import fresh_module",
    ]
    first = instructions(command)
    assert any((tmp_path / "__pycache__").iterdir())
    later = instructions(command)
    assert abs(first - later) / later < 0.02


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
    others = ", ".join(name.replace("_", "-") for name in BENCHES if name != "host_cost")
    assert f"Not run yet: {others}." in text and "frigate-zmq" in others


# -- make bench's exit status: every target met, a target missed, a benchmark not run here ----
def write_image_summaries(dist, sizes_mb: dict) -> None:
    """What 'make image' leaves in dist/images, one summary per (image, architecture)."""
    from oci_image.definition import load
    from pipeline.npuctl_package import npuctl_version

    (dist / "images").mkdir(parents=True, exist_ok=True)
    for (name, architecture), size in sizes_mb.items():
        stem = load(name).stem(npuctl_version(), architecture)
        summary = {"uncompressed_bytes": size * 1e6, "compressed_bytes": size * 4e5}
        (dist / "images" / f"{stem}.json").write_text(json.dumps(summary))


def every_image(size_of) -> dict:
    from oci_image.definition import image_names, load

    return {
        (name, architecture): size_of(load(name))
        for name in image_names()
        for architecture in load(name).architectures
    }


def run_bench(tmp_path, *args):
    import os
    import subprocess
    from pathlib import Path

    reports = tmp_path / "reports"
    return subprocess.run(
        [sys.executable, "-m", *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={
            **os.environ,
            "BENCH_REPORT_DIR": str(reports),
            "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "tools"),
        },
        timeout=120,
        check=False,
    )


def test_bench_exits_0_when_every_image_is_within_its_bound(tmp_path):
    write_image_summaries(tmp_path / "dist", every_image(lambda d: d.size_limit_mb - 1))
    for command in (("bench.image_size",), ("bench", "image_size")):
        result = run_bench(tmp_path, *command)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "[ok]" in result.stdout and "MISSED" not in result.stdout


def test_bench_exits_1_when_a_target_is_missed_even_beside_a_row_not_run(tmp_path):
    sizes = every_image(lambda d: d.size_limit_mb - 1)
    first, second = sorted(sizes)[:2]
    sizes[first] = 10_000  # over every bound
    del sizes[second]
    write_image_summaries(tmp_path / "dist", sizes)
    for command in (("bench.image_size",), ("bench", "image_size")):
        result = run_bench(tmp_path, *command)
        assert result.returncode == 1, result.stdout + result.stderr
        assert "[MISSED]" in result.stdout and "[NOT RUN:" in result.stdout


def test_bench_exits_0_and_builds_nothing_when_an_image_is_absent(tmp_path):
    sizes = every_image(lambda d: d.size_limit_mb - 1)
    absent = sorted(sizes)[0]
    del sizes[absent]
    write_image_summaries(tmp_path / "dist", sizes)
    before = sorted(p.name for p in (tmp_path / "dist" / "images").iterdir())
    result = run_bench(tmp_path, "bench", "image_size")
    assert result.returncode == 0, result.stdout + result.stderr
    assert sorted(p.name for p in (tmp_path / "dist" / "images").iterdir()) == before
    line = next(line for line in result.stdout.splitlines() if "NOT RUN" in line)
    assert f"{absent[0]} image ({absent[1]})" in line
    assert "'make deb image' builds it" in line
    report = json.loads((tmp_path / "reports" / "image-size.json").read_text())
    not_run = [row for row in report["rows"] if "not_run" in row]
    assert len(not_run) == 1 and "make deb image" in not_run[0]["not_run"]
    text = render(tmp_path / "reports", tmp_path / "none")
    assert f"not run: {not_run[0]['not_run']}" in text


def test_the_combined_status_orders_missed_over_not_run():
    from bench.__main__ import combined

    assert combined([0, 0]) == 0
    assert combined([0, 3]) == 3
    assert combined([3, 1, 0]) == 1
    assert combined([0, 2]) == 1  # a benchmark that failed otherwise is no pass
