"""The Zhouyi NPU for containers: /dev/aipu, and libnoe's folder (the library and what CIX
ships beside it) read-only, with the environment npuctl reads in the container."""

from __future__ import annotations

import stat
from pathlib import Path

from npuctl.cdi.spec import NpuEdits
from npuctl.drivers import for_platform
from npuctl.errors import ExitCode, NpuctlError
from npuctl.system import System

from .facts import CDI_KIND, NAME

DEVICE_NODE = for_platform("zhouyi").device_example


def edits(system: System, options: dict[str, object]) -> NpuEdits:
    info = system.stat(DEVICE_NODE)
    if info is None or not stat.S_ISCHR(info.st_mode):
        raise NpuctlError(
            f"{DEVICE_NODE} is not a character device on this machine: load the aipu driver "
            "first (npuctl doctor says how); no spec written",
            ExitCode.DOCTOR_FAILURES,
        )
    library = Path(str(options["library"]))
    host_library = system.path(str(library))
    if not host_library.is_file():
        raise NpuctlError(
            f"libnoe is not at {library}: install cix-noe-umd (npuctl provision) or pass "
            "--library; no spec written",
            ExitCode.NPU,
        )
    folder = str(library.parent)
    return NpuEdits(
        CDI_KIND,
        [(str(system.path(DEVICE_NODE)), DEVICE_NODE)],
        [(str(system.path(folder)), folder)],
        {"NPUCTL_PLATFORM": NAME, "NPUCTL_LIBNOE": str(library)},
    )
