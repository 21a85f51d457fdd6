"""The table 'make bench' prints: each measurement beside its reference, the ratio, the target
and whether it was met."""

from __future__ import annotations


def print_rows(results: list[dict]) -> bool:
    width = max(len(r["name"]) for r in results)
    print(f"{'measurement':{width}}  {'ours':>10}  {'reference':>10}  {'ratio':>6}  target")
    for r in results:
        print(
            f"{r['name']:{width}}  {r['ours']:10.3f}  {r['reference']:10.3f}  "
            f"{r['ratio']:5.1f}x  {r['target']} [{'ok' if r['ok'] else 'MISSED'}]  "
            f"({r['unit']})"
        )
    return all(r["ok"] for r in results)
