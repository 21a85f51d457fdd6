"""The doctor's verdict for fleets: Node Feature Discovery labels (a local feature file in
features.d/) and node-problem-detector's custom-plugin protocol.

NFD reads ``name=value`` lines; ``# +expiry-time=RFC3339`` makes the labels vanish when the
agent that writes them stops (a dead timer must not leave a node labelled healthy). The file
is written to a dotfile in the same folder and renamed, so NFD never reads half of it."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

from ..files import write_text_atomically
from .findings import Report, Status

NAMESPACE = "npuctl.io"
DEFAULT_FILE = Path("/etc/kubernetes/node-feature-discovery/features.d/npuctl")
_VALUE = re.compile(r"[^A-Za-z0-9._-]+")


def label_value(text: object) -> str:
    """A Kubernetes label value: at most 63 of [A-Za-z0-9._-], alphanumeric at both ends."""
    value = _VALUE.sub("-", str(text))[:63].strip("._-")
    return value or "unknown"


def labels(report: Report) -> dict[str, str]:
    facts = report.facts
    found: dict[str, str] = {
        "npu-family": label_value(facts.get("platform", "none")),
        "npu-healthy": "true" if facts.get("platform") and report.exit_code in (0, 10) else "false",
    }
    if "driver_held" in facts:  # the running kernel's build of the driver is held
        found["driver-held"] = "true" if facts["driver_held"] else "false"
    versions = facts.get("versions")
    if isinstance(versions, dict):
        found["driver-version"] = label_value(versions.get("kmd", ""))
        found["library-version"] = label_value(versions.get("umd", ""))
    if facts.get("dkms_version") and "driver-version" not in found:
        found["driver-version"] = label_value(str(facts["dkms_version"]).split("+")[0])
    for finding in report.findings:
        if finding.id.startswith("models.") and finding.id.count(".") == 1:
            model = finding.id.split(".", 1)[1]
            if model != "clip-sanity":
                found[f"model.{label_value(model)}"] = (
                    "true" if finding.status in (Status.OK, Status.WARN) else "false"
                )
    return {f"{NAMESPACE}/{name}": value for name, value in found.items()}


def feature_file(report: Report, expiry: timedelta, now: datetime | None = None) -> str:
    now = now or datetime.now(UTC)
    expires = (now + expiry).replace(microsecond=0).isoformat().replace("+00:00", "Z")
    lines = [f"# +expiry-time={expires}", "# written by npuctl doctor --nfd"]
    lines += [f"{name}={value}" for name, value in sorted(labels(report).items())]
    return "\n".join(lines) + "\n"


def write_features(path: Path, report: Report, expiry: timedelta) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomically(path, feature_file(report, expiry))


def problem_detector(report: Report) -> tuple[int, str]:
    """node-problem-detector's custom plugin: 0 ok, 1 problem, 2 unknown; one line."""
    if not report.facts.get("platform"):
        return 2, "no supported NPU on this node"
    failures = [f for f in report.findings if f.status == Status.FAIL]
    if failures:
        more = f" (+{len(failures) - 1} more)" if len(failures) > 1 else ""
        return 1, f"NPU unhealthy: {failures[0].summary}{more}"
    return 0, f"NPU healthy ({report.facts['platform']})"
