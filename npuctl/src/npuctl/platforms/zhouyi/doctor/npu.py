"""Checks through libnoe: the library, the context, driver and library versions, and the
models really running on the NPU. libnoe runs in child processes (see npu_probe)."""

from __future__ import annotations

import json
from pathlib import Path

from npuctl.child import run_module
from npuctl.doctor.findings import Finding, Report, Status, skip
from npuctl.models.manifest import Manifest
from npuctl.models.store import Lock, verify

from ..noe.abi import DIALECTS, OPEN_DEVICE_FAILED
from . import pairing

EXPECTED_TARGET = "X2_1204MP3"
EXPECTED_TOPOLOGY = {"partitions": 1, "clusters": 1, "cores": 3}
# Raw inference reported for the board (200 runs); a run far slower than this is suspicious.
REPORTED_MS = {"clip-text": 15.5, "clip-visual": 14.1, "yolov8n": 15.1}
SLOW_FACTOR = 3.0


def _child(args: list[str], timeout: float) -> tuple[dict | None, str]:
    """The child's JSON answer, or None and what went wrong."""
    result = run_module("npuctl.platforms.zhouyi.doctor.npu_probe", args, timeout)
    return result.answer, result.problem


def check_library(library: Path, report: Report, timeout: float) -> bool:
    area = "libnoe"
    if not library.exists():
        report.add(
            Finding(
                "libnoe.found",
                area,
                Status.FAIL,
                f"libnoe: {library} not found",
                "CIX's user-mode driver package cix-noe-umd provides it.",
                fix="sudo npuctl provision --umd-deb cix-noe-umd_2.0.2_arm64.deb",
            )
        )
        return False
    answer, problem = _child(["library", str(library)], timeout)
    if answer is None:
        report.add(
            Finding(
                "libnoe.context",
                area,
                Status.FAIL,
                f"libnoe: opening the NPU {problem}",
                fix="free some memory, check that 'python3 -c pass' runs, then run "
                "npuctl doctor again"
                if problem.startswith("could not start")
                else None,
            )
        )
        return False
    if answer.get("stage") == "load":
        report.add(Finding("libnoe.loadable", area, Status.FAIL, f"libnoe: {answer.get('error')}"))
        return False
    if answer.get("stage") == "context":
        detail, fix = "", None
        if answer.get("status") == OPEN_DEVICE_FAILED:
            detail, fix = _open_device_failed(report)
        report.add(
            Finding(
                "libnoe.context",
                area,
                Status.FAIL,
                f"libnoe: {answer.get('error')}",
                detail,
                fix=fix,
            )
        )
        return False
    topology, target = answer["topology"], answer["target"]
    versions = answer["versions"]
    report.facts.update({"npu": topology, "target": target, "versions": versions})
    status = (
        Status.OK if topology == EXPECTED_TOPOLOGY and target == EXPECTED_TARGET else (Status.WARN)
    )
    report.add(
        Finding(
            "libnoe.context",
            area,
            status,
            f"libnoe {versions['umd']}: context open, target {target}, "
            f"{topology['partitions']} partition, {topology['clusters']} cluster, "
            f"{topology['cores']} cores",
            ""
            if status == Status.OK
            else f"Expected {EXPECTED_TARGET} with 1/1/3 on the Orange Pi 6 Plus.",
        )
    )
    check_versions(versions, report)
    return True


def _open_device_failed(report: Report) -> tuple[str, str]:
    """Why libnoe may fail to open /dev/aipu, given what the checks above found."""
    failed = [
        f.id for f in report.findings if f.area in ("module", "device") and f.status == Status.FAIL
    ]
    if failed:
        return (
            f"Fix {', '.join(failed)} first: libnoe opens /dev/aipu.",
            "npuctl doctor --quick",
        )
    return (
        "The module is loaded and /dev/aipu is usable, yet libnoe cannot open it: another "
        "process may hold the NPU (a running inference server?), or this libnoe was built "
        "for another kernel driver version.",
        "sudo fuser -v /dev/aipu; modinfo -F version aipu   "
        "# who holds the NPU; the driver version libnoe must match",
    )


def umd_package(library: str) -> str:
    return next(dialect.package for dialect in DIALECTS if dialect.library == library)


def check_versions(versions: dict[str, str], report: Report) -> None:
    """The pair as libnoe reports it, unless it was judged before the context opened."""
    if not any(finding.id == pairing.FINDING for finding in report.findings):
        known = report.facts.get("kmd")
        kmd = known["version"] if isinstance(known, dict) else versions.get("kmd", "")
        umd = report.facts.get("umd")
        library = str(umd["library"]) if isinstance(umd, dict) else "libnoe"
        if versions.get("refused") and not versions.get("umd"):
            report.add(
                Finding(
                    pairing.FINDING,
                    pairing.AREA,
                    Status.WARN,
                    f"Driver {kmd or 'version unknown'} with {library} of unknown version: "
                    "the pair is not judged",
                    versions["refused"],
                    fix=f"sudo apt install {umd_package(library)}   # a {library} whose "
                    "version npuctl can read",
                )
            )
            return
        pairing.report_pair(kmd, versions.get("umd", ""), report, library)


def _immich(manifest: Manifest, usable: dict[str, Path], report: Report) -> None:
    """Whether the models Immich's smart search asks for by name (the manifest's immich:)
    all work here: its server needs the text and the image encoder alike."""
    needed: dict[str, list[str]] = {}
    for entry in manifest.models_of("zhouyi"):
        if entry.immich:
            needed.setdefault(entry.immich, []).append(entry.name)
    for name, models in sorted(needed.items()):
        missing = [model for model in models if model not in usable]
        report.add(
            Finding(
                f"models.immich.{name}",
                "models",
                Status.INFO if missing else Status.OK,
                f"Immich smart search ({name}): "
                + (f"needs {', '.join(missing)}" if missing else f"{' and '.join(models)} work"),
                "npuctl serve answers Immich's /predict with these (docs/serving.md)",
                fix=f"npuctl models fetch {' '.join(missing)}" if missing else None,
            )
        )


def check_models(
    manifest: Manifest,
    models_dir: Path,
    library: Path,
    report: Report,
    timeout: float,
    timeout_ms: int,
) -> None:
    area = "models"
    lock = Lock.load(models_dir)
    usable: dict[str, Path] = {}
    for entry in manifest.models_of("zhouyi"):
        check = verify(entry, models_dir, lock)
        if check.state == "missing":
            report.add(
                Finding(
                    f"models.{entry.name}",
                    area,
                    Status.WARN,
                    f"Model {entry.name}: not downloaded",
                    fix=f"npuctl models fetch {entry.name}",
                )
            )
            continue
        if check.state in ("invalid", "mismatch"):
            report.add(
                Finding(
                    f"models.{entry.name}",
                    area,
                    Status.FAIL,
                    f"Model {entry.name}: {check.detail}",
                    fix=f"rm {check.path} && npuctl models fetch {entry.name}",
                )
            )
            continue
        answer, problem = _child(
            ["model", str(library), entry.name, str(check.path), str(timeout_ms)], timeout
        )
        pinned = "" if check.ok else " (unpinned: no checksum to compare)"
        if answer is None:
            hung = "hung" in problem
            report.add(
                Finding(
                    f"models.{entry.name}",
                    area,
                    Status.FAIL,
                    f"Model {entry.name}: {'inference' if hung else 'loading'} {problem}",
                    "Two inferences back to back never finishing is the known second-inference "
                    "hang of old drivers."
                    if hung
                    else "The file may be malformed.",
                    fix="sudo apt install ./aipu-dkms_<version>_all.deb"
                    if hung
                    else f"rm {check.path} && npuctl models fetch {entry.name}",
                )
            )
            continue
        if "error" in answer:
            stage = answer.get("stage", "")
            second = stage == "inference 2"
            report.add(
                Finding(
                    f"models.{entry.name}",
                    area,
                    Status.FAIL,
                    f"Model {entry.name}: {stage} failed: {answer['error']}",
                    "The first inference worked and the second did not: the known second-"
                    "inference hang (fixed by aipu-dkms's patch 0009)."
                    if second
                    else "",
                    fix="sudo apt install ./aipu-dkms_<version>_all.deb" if second else None,
                )
            )
            continue
        problems = [
            label
            for key, label in (
                ("finite", "outputs not finite"),
                ("deterministic", "same input, different output"),
                ("input_sensitive", "output ignores the input"),
            )
            if not answer[key]
        ]
        ms = answer["milliseconds"]
        timing = f"inferences {ms[0]:.1f} / {ms[1]:.1f} ms"
        if problems:
            report.add(
                Finding(
                    f"models.{entry.name}",
                    area,
                    Status.FAIL,
                    f"Model {entry.name}: {', '.join(problems)}",
                    timing,
                )
            )
            continue
        reported = REPORTED_MS.get(entry.name)
        slow = reported is not None and min(ms[1:]) > SLOW_FACTOR * reported
        report.add(
            Finding(
                f"models.{entry.name}",
                area,
                Status.WARN if slow or pinned else Status.OK,
                f"Model {entry.name}: two inferences ok, {timing}{pinned}",
                f"Reported for the board: {reported} ms; this run is far slower "
                "(runtime power management? frequency?)"
                if slow
                else "",
            )
        )
        usable[entry.name] = check.path
    _immich(manifest, usable, report)
    vocab = models_dir / manifest.get("clip-bpe-vocab").file
    if {"clip-text", "clip-visual"} <= set(usable) and vocab.exists():
        answer, problem = _child(
            [
                "clip-sanity",
                str(library),
                str(usable["clip-text"]),
                str(usable["clip-visual"]),
                str(vocab),
            ],
            timeout,
        )
        if answer is None or not answer.get("agrees"):
            report.add(
                Finding(
                    "models.clip-sanity",
                    area,
                    Status.WARN,
                    "CLIP: a drawn red circle does not match 'a red circle' best "
                    f"{problem}".rstrip(),
                    json.dumps(answer) if answer else "",
                )
            )
        else:
            report.add(
                Finding(
                    "models.clip-sanity",
                    area,
                    Status.OK,
                    "CLIP: text and image encoders agree on a drawn red circle",
                )
            )
    elif not usable:
        skip(report, "models.clip-sanity", area, "CLIP text-image check", "no usable models")


def check_text_cleaning(report: Report) -> None:
    """OpenAI's CLIP tokenizer cleans text with ftfy; without it npuctl's own fixes give the
    same ids except where ftfy would repair mojibake."""
    from ..pipelines.text_fixes import CLEANING, EXACT

    report.add(
        Finding(
            "python.ftfy",
            "python",
            Status.OK if EXACT else Status.INFO,
            f"CLIP text cleaning: {CLEANING}",
            ""
            if EXACT
            else "Token ids match OpenAI's tokenizer except on mojibake (text decoded with "
            "the wrong encoding), which ftfy repairs.",
            fix=None
            if EXACT
            else "sudo apt install python3-ftfy   # Debian 13+, or: pip install ftfy",
        )
    )
