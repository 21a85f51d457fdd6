"""The first-load trials' rows of docs/kernel-matrix-results.md come from make check-trials'
JSON report, replace their own section only, and bad reports are one line."""

import json
import subprocess
import sys

from kernel_lab.trial import TRIAL_SCHEMA
from kernel_lab.trial_tables import HEADING

REPORT = {
    "schema": TRIAL_SCHEMA,
    "generated": "2026-11-28 17:30 UTC",
    "trials": [
        {
            "suite": "bookworm",
            "kernel": "6.1.0-56-arm64",
            "package": "aipu-dkms",
            "log": "build/trial-lab/trial.log",
            "boots": [
                {
                    "boot": "2 stand-in lab-oops again",
                    "expected": "held: not loaded",
                    "status": "ok",
                    "detail": "aipu lab-oops is held | not loaded",
                    "seconds": 10.8,
                }
            ],
        }
    ],
}


def _tables(*args):
    return subprocess.run(
        [sys.executable, "-m", "kernel_lab.trial_tables", *map(str, args)],
        capture_output=True,
        text=True,
        check=False,
    )


def test_the_rows_replace_their_section_and_keep_the_matrix(tmp_path):
    report = tmp_path / "kernel-trials.json"
    report.write_text(json.dumps(REPORT))
    page = tmp_path / "results.md"
    page.write_text(f"# Kernel matrix results\n\n```\nmatrix table\n```\n\n{HEADING}\n\nold rows\n")
    assert _tables(report, page).returncode == 0
    text = page.read_text()
    assert text.startswith("# Kernel matrix results\n\n```\nmatrix table\n```\n")
    assert "old rows" not in text and text.count(HEADING) == 1
    row = (
        "| aipu-dkms | 6.1.0-56-arm64 | 2 stand-in lab-oops again | held: not loaded | ok | "
        "aipu lab-oops is held \\| not loaded |"
    )
    assert row in text.splitlines()
    assert _tables(report, page).returncode == 0 and page.read_text() == text  # idempotent


def test_a_report_of_another_schema_is_one_line(tmp_path):
    report = tmp_path / "kernel-trials.json"
    report.write_text(json.dumps({**REPORT, "schema": 0}))
    page = tmp_path / "results.md"
    page.write_text("# Kernel matrix results\n")
    result = _tables(report, page)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    assert "make check-trials" in result.stderr
    assert page.read_text() == "# Kernel matrix results\n"
