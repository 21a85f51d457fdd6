"""The order of the checks: a failed prerequisite skips what depends on it, saying why."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..models.manifest import Manifest
from . import host, npu
from .findings import Report
from .system import System


@dataclass
class Options:
    library: Path
    models_dir: Path
    manifest: Manifest
    quick: bool = False
    timeout_s: float = 120.0  # per child process (library, one model)
    timeout_ms: int = 10_000  # per inference


def run_doctor(system: System, options: Options) -> Report:
    report = Report()
    if not host.check_platform(system, report):
        for finding_id, what in (
            ("kernel", "Kernel, DKMS, module and device"),
            ("libnoe", "libnoe and models"),
        ):
            host.skip(report, finding_id, finding_id, what, "no Zhouyi NPU on this machine")
        return report
    headers = host.check_headers(system, report)
    dkms = (
        host.check_dkms(system, report)
        if headers
        else host.skip(
            report, "dkms.installed", "dkms", "DKMS", "no headers for the running kernel"
        )
        or False
    )
    host.check_secure_boot(system, report)
    module = (
        host.check_module(system, report)
        if dkms
        else host.skip(report, "module.file", "module", "Module", "DKMS has not installed it")
        or False
    )
    device = (
        host.check_device(system, report)
        if module
        else host.skip(report, "device.node", "device", "/dev/aipu", "the driver is not bound")
        or False
    )
    library = (
        npu.check_library(options.library, report, options.timeout_s)
        if device
        else (
            host.skip(report, "libnoe.context", "libnoe", "libnoe", "/dev/aipu is not usable")
            or False
        )
    )
    if options.quick:
        host.skip(report, "models", "models", "Models", "--quick")
    elif library:
        npu.check_models(
            options.manifest,
            options.models_dir,
            options.library,
            report,
            options.timeout_s,
            options.timeout_ms,
        )
    else:
        host.skip(report, "models", "models", "Models", "libnoe cannot open the NPU")
    npu.check_text_cleaning(report)
    return report
