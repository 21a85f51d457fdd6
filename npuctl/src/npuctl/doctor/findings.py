"""Findings and the report: one output contract for humans (flutter-doctor style) and for
machines (JSON, schema npuctl-doctor/1)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum

from ..errors import ExitCode

SCHEMA = "npuctl-doctor/1"


class Status(StrEnum):
    OK = "ok"
    WARN = "warning"
    FAIL = "failure"
    SKIP = "skipped"
    INFO = "info"


SYMBOLS = {
    Status.OK: "[✓]",
    Status.WARN: "[!]",
    Status.FAIL: "[✗]",
    Status.SKIP: "[-]",
    Status.INFO: "[i]",
}


@dataclass
class Finding:
    id: str  # stable, e.g. "dkms.installed"
    area: str
    status: Status
    summary: str
    detail: str = ""
    fix: str | None = None

    def as_dict(self) -> dict[str, object]:
        data = asdict(self)
        data["status"] = self.status.value
        return data


def skip(report: Report, finding_id: str, area: str, what: str, reason: str) -> None:
    report.add(Finding(finding_id, area, Status.SKIP, f"{what}: skipped ({reason})"))


NO_NPU_FIX = "nothing to fix here: this machine has no supported NPU"


@dataclass
class Report:
    findings: list[Finding] = field(default_factory=list)
    facts: dict[str, object] = field(default_factory=dict)

    def add(self, finding: Finding) -> Finding:
        self.findings.append(finding)
        return finding

    def status_of(self, finding_id: str) -> Status | None:
        for finding in self.findings:
            if finding.id == finding_id:
                return finding.status
        return None

    def passed(self, *finding_ids: str) -> bool:
        return all(self.status_of(i) in (Status.OK, Status.WARN, Status.INFO) for i in finding_ids)

    def counts(self) -> dict[str, int]:
        return {
            status.value: sum(1 for f in self.findings if f.status == status) for status in Status
        }

    @property
    def exit_code(self) -> ExitCode:
        statuses = {finding.status for finding in self.findings}
        if Status.FAIL in statuses:
            return ExitCode.DOCTOR_FAILURES
        if Status.WARN in statuses:
            return ExitCode.DOCTOR_WARNINGS
        return ExitCode.OK

    def as_dict(self, version: str) -> dict[str, object]:
        return {
            "schema": SCHEMA,
            "npuctl": version,
            "facts": self.facts,
            "checks": [finding.as_dict() for finding in self.findings],
            "summary": self.counts(),
            "exit_code": int(self.exit_code),
        }

    def render(self, verdicts: dict[ExitCode, str] | None = None) -> str:
        lines = []
        for finding in self.findings:
            lines.append(f"{SYMBOLS[finding.status]} {finding.summary}")
            if finding.detail:
                lines += [f"    {line}" for line in finding.detail.splitlines()]
            if finding.fix:
                lines.append(f"    fix: {finding.fix}")
        counts = self.counts()
        verdict = (
            verdicts
            or {
                ExitCode.OK: "the NPU stack is healthy",
                ExitCode.DOCTOR_WARNINGS: "usable, with warnings",
                ExitCode.DOCTOR_FAILURES: "not usable yet",
            }
        )[self.exit_code]
        lines.append("")
        lines.append(
            f"Summary: {verdict} — {counts['ok']} ok, {counts['warning']} "
            f"warnings, {counts['failure']} failures, {counts['skipped']} skipped"
        )
        return "\n".join(lines)
