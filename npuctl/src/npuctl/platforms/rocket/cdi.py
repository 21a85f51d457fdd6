"""The RK3588 NPU for containers: every /dev/accel/accel* node and Mesa's Teflon delegate
read-only, with the environment npuctl reads in the container."""

from __future__ import annotations

import stat
from pathlib import Path

from npuctl.cdi.spec import NpuEdits
from npuctl.errors import ExitCode, NpuctlError
from npuctl.system import System

from .facts import CDI_KIND, NAME


def edits(system: System, options: dict[str, object]) -> NpuEdits:
    nodes = [
        path
        for path in system.glob("/dev/accel/accel*")
        if (info := system.stat(path)) is not None and stat.S_ISCHR(info.st_mode)
    ]
    if not nodes:
        raise NpuctlError(
            "no /dev/accel/accel* device on this machine: load the rocket driver first "
            "(npuctl doctor says how); no spec written",
            ExitCode.DOCTOR_FAILURES,
        )
    delegate = Path(str(options["delegate"]))
    if not system.path(str(delegate)).is_file():
        raise NpuctlError(
            f"Mesa's Teflon delegate is not at {delegate}: sudo npuctl provision --only teflon; "
            "no spec written",
            ExitCode.NPU,
        )
    return NpuEdits(
        CDI_KIND,
        [(str(system.path(node)), node) for node in nodes],
        [(str(system.path(str(delegate))), str(delegate))],
        {"NPUCTL_PLATFORM": NAME, "NPUCTL_TEFLON": str(delegate)},
    )
