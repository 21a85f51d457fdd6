"""The doctor's frame: which NPU family this machine has, then that family's checks (in
dependency order: a failed prerequisite skips what depends on it, saying why)."""

from __future__ import annotations

import json
from pathlib import Path

from ..defaults import FRIGATE_UPLOADS_RECORD, SERVICE_RUNTIME_DIRECTORY, default_serve_socket
from ..families import absent_reasons, all_platforms, chosen
from ..platform import Platform
from ..system import System, board_name
from .chain import run_chain
from .findings import NO_NPU_FIX, Finding, Report, Status
from .options import Options


def run_doctor(system: System, options: Options, forced: str | None = None) -> Report:
    report = Report()
    machine = system.machine()
    board = board_name(system)
    report.facts.update({"machine": machine, "board": board, "kernel": system.kernel_release()})
    platform = chosen(system, forced)
    if platform is None:
        report.add(_no_npu(machine, board))
        return report
    report.facts["platform"] = platform.name
    check_stages(system, platform, options, report)
    check_cdi_spec(system, platform, options, report)
    check_frigate_uploads(system, report)
    return report


def check_stages(system: System, platform: Platform, options: Options, report: Report) -> None:
    """The family's stages, in one chain: the board, the driver, the user space, the models."""
    board = platform.check_board(system, report)
    if board is None:
        return
    run_chain(
        [
            *platform.check_driver(system, options, report, board),
            *platform.check_user_space(system, options, report),
            *platform.check_models(system, options, report),
        ],
        report,
    )


def check_cdi_spec(system: System, platform: Platform, options: Options, report: Report) -> None:
    """A CDI spec npuctl wrote must still describe this machine (an upgrade moves libraries,
    a new kernel renumbers devices); other tools' specs are not npuctl's business."""
    from ..cdi.spec import SPEC_DIRS, stale
    from ..errors import NpuctlError

    try:
        edits = platform.cdi_edits(system, options.platform_options)
    except NpuctlError:
        return  # nothing to compare with: the findings above say what is missing
    if edits is None:
        return
    for directory in SPEC_DIRS:
        problem = stale(system.path(str(directory)), edits)
        if problem:
            report.add(
                Finding(
                    "cdi.spec",
                    "containers",
                    Status.WARN,
                    f"CDI spec: {problem}",
                    "Containers started with --device " + edits.kind + "=... get what the "
                    "spec says, not what the machine has.",
                    fix="sudo npuctl cdi generate",
                )
            )


def check_frigate_uploads(system: System, report: Report) -> None:
    """The model files Frigate uploaded to the running server (npuctl serve --zmq-uploads),
    as the server recorded them: what, from whom, and whether it serves them."""
    for folder in (SERVICE_RUNTIME_DIRECTORY, *_user_runtime()):
        text = system.read(str(folder / FRIGATE_UPLOADS_RECORD))
        if text is None:
            continue
        try:
            records = json.loads(text)
        except ValueError:
            continue
        for index, record in enumerate(records if isinstance(records, list) else []):
            _upload_finding(report, f"serve.frigate_upload.{index + 1}", record)


def _user_runtime() -> list[Path]:
    socket = default_serve_socket()
    return [socket.parent] if socket is not None else []


def _upload_finding(report: Report, finding_id: str, record: object) -> None:
    if not isinstance(record, dict):
        return
    what = (
        f"Frigate upload: {str(record.get('name'))[:80]} ({record.get('bytes')} bytes, sha256 "
        f"{str(record.get('sha256'))[:12]}) from {str(record.get('peer'))[:60]} at "
        f"{str(record.get('at'))[:20]}"
    )
    if record.get("loaded"):
        owner = str(record.get("owner") or record.get("peer"))[:60]
        report.add(Finding(finding_id, "serving", Status.INFO, f"{what}: served to {owner}"))
        return
    report.add(
        Finding(
            finding_id,
            "serving",
            Status.WARN,
            f"{what}: not served",
            str(record.get("error", ""))[:300],
            fix="give Frigate a model this NPU serves (npuctl models list), or serve its file "
            "with npuctl serve --models",
        )
    )


def _no_npu(machine: str, board: str) -> Finding:
    if machine not in ("aarch64", "arm64"):
        return Finding(
            "platform.arch",
            "platform",
            Status.FAIL,
            f"Platform: {machine}, not arm64 — no supported NPU on this machine",
            "npuctl checks the "
            + " or the ".join(platform.title for platform in all_platforms())
            + ": run it on the board, or pass --platform to inspect an image.",
            fix=NO_NPU_FIX,
        )
    return Finding(
        "platform.npu",
        "platform",
        Status.FAIL,
        f"NPU: none of the supported NPUs on {board}",
        absent_reasons(),
        fix=NO_NPU_FIX,
    )
