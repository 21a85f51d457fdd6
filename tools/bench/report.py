"""The table 'make bench' prints: each measurement beside its reference, the ratio, the target
and whether it was met; the same rows as a JSON report (``$BENCH_REPORT_DIR/<bench>.json``)
for the tables in docs/ (bench.tables)."""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path

from pipeline.atomic import write_atomically

SCHEMA = "npuctl-bench/1"

# The exit status of each benchmark and of 'make bench' (docs/tests.md): a missed target
# outweighs a row that could not run here.
MET = 0
MISSED = 1
NOT_RUN = 3


def not_run(name: str, unit: str, target: str, reason: str) -> dict:
    """A row that could not be measured on this machine, and why (with the command that
    makes it measurable)."""
    return {"name": name, "unit": unit, "target": target, "not_run": reason}


def status(results: list[dict]) -> int:
    if any("not_run" not in r and not r["ok"] for r in results):
        return MISSED
    return NOT_RUN if any("not_run" in r for r in results) else MET


def ratio_text(ratio: float) -> str:
    """A ratio with the digits its verdict needs: below 1 a third decimal, so that 0.105
    against a target of 0.10 does not read as 0.10."""
    return f"{ratio:.3f}x" if ratio < 1 else f"{ratio:.2f}x"


def print_rows(results: list[dict], bench: str) -> bool:
    """Print and report the rows; True when every row ran and met its target."""
    width = max(len(r["name"]) for r in results)
    print(f"{'measurement':{width}}  {'ours':>10}  {'reference':>10}  {'ratio':>8}  target")
    for r in results:
        if "not_run" in r:
            print(f"{r['name']:{width}}  {r['target']} [NOT RUN: {r['not_run']}]")
            continue
        print(
            f"{r['name']:{width}}  {r['ours']:10.3f}  {r['reference']:10.3f}  "
            f"{ratio_text(r['ratio']):>8}  {r['target']} [{'ok' if r['ok'] else 'MISSED'}]  "
            f"({r['unit']})"
        )
    write_report(results, bench)
    return status(results) == MET


def write_report(results: list[dict], bench: str) -> Path | None:
    folder = os.environ.get("BENCH_REPORT_DIR")
    if not folder:
        return None
    target = Path(folder) / f"{bench}.json"
    document = {
        "schema": SCHEMA,
        "bench": bench,
        "conditions": os.environ.get("BENCH_CONDITIONS", "as the machine was"),
        "cpus": len(os.sched_getaffinity(0)),
        "machine": platform.machine(),
        "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "rows": [{key: row[key] for key in sorted(row)} for row in results],
    }
    write_atomically(target, json.dumps(document, indent=1) + "\n")
    return target
