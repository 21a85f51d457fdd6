"""The Zhouyi checks in dependency order: a failed prerequisite skips what depends on it,
saying why."""

from __future__ import annotations

from pathlib import Path

from npuctl.doctor.findings import Report, skip
from npuctl.doctor.run import Options
from npuctl.system import System

from .. import DEFAULT_TIMEOUT_MS
from . import host, npu
from .noe_paths import check_noe_paths


def check(system: System, options: Options, report: Report) -> None:
    library_path = Path(str(options.platform_options.get("library") or ""))
    timeout_ms = int(str(options.platform_options.get("timeout_ms") or DEFAULT_TIMEOUT_MS))
    if not host.check_platform(system, report):
        for finding_id, what in (
            ("kernel", "Kernel, DKMS, module and device"),
            ("libnoe", "libnoe and models"),
        ):
            skip(report, finding_id, finding_id, what, "no Zhouyi NPU on this machine")
        return
    headers = host.check_headers(system, report)
    dkms = (
        host.check_dkms(system, report)
        if headers
        else skip(report, "dkms.installed", "dkms", "DKMS", "no headers for the running kernel")
        or False
    )
    host.check_secure_boot(system, report)
    module = (
        host.check_module(system, report)
        if dkms
        else skip(report, "module.file", "module", "Module", "DKMS has not installed it") or False
    )
    device = (
        host.check_device(system, report)
        if module
        else skip(report, "device.node", "device", "/dev/aipu", "the driver is not bound") or False
    )
    library = (
        npu.check_library(library_path, report, options.timeout_s)
        if device
        else (
            skip(report, "libnoe.context", "libnoe", "libnoe", "/dev/aipu is not usable") or False
        )
    )
    if options.quick:
        skip(report, "models", "models", "Models", "--quick")
    elif library:
        npu.check_models(
            options.manifest,
            options.models_dir,
            library_path,
            report,
            options.timeout_s,
            timeout_ms,
        )
    else:
        skip(report, "models", "models", "Models", "libnoe cannot open the NPU")
    npu.check_text_cleaning(report)
    check_noe_paths(system, report, options.timeout_s)
