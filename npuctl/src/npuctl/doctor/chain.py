"""The doctor's checks as a declared chain: each step names the steps it needs, and a step
whose needs did not pass is reported as skipped with the reason its first failed need gives.
A platform lists its steps; nothing is hand-wired."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .findings import Report, skip


@dataclass(frozen=True)
class Step:
    name: str  # what other steps name in 'needs'
    finding: str  # the finding id reported when the step is skipped
    area: str
    what: str  # "DKMS", "/dev/aipu": the skipped finding's subject
    check: Callable[[], bool | None]  # False: failed; True or None: dependents may run
    needs: tuple[str, ...] = ()
    # Why dependents are skipped when this step fails ("no headers for the running kernel").
    failed: str = ""


def run_chain(steps: Sequence[Step], report: Report) -> dict[str, bool]:
    """Run the steps in order; the result says which passed."""
    passed: dict[str, bool] = {}
    reasons: dict[str, str] = {}
    for step in steps:
        unmet = next((need for need in step.needs if not passed.get(need)), None)
        if unmet is not None:
            reasons[step.name] = reasons[unmet]
            skip(report, step.finding, step.area, step.what, reasons[unmet])
            passed[step.name] = False
            continue
        passed[step.name] = step.check() is not False
        reasons[step.name] = step.failed or f"{step.what.lower()} failed"
    return passed
