"""Which user-mode driver npuctl drives the Zhouyi through when none is named: CIX's libnoe or
Arm China's libaipudrv, the same API under another prefix, each speaking one kernel-driver
line (docs/driver-lines.md). libnoe where it is installed, unless libaipudrv is too and the
driver package installed is the line libaipudrv speaks (aipu-compass-dkms); libaipudrv where
it alone is installed."""

from __future__ import annotations

import os
from pathlib import Path

from npuctl.drivers import installed_for_platform
from npuctl.system import System

from .facts import DEFAULT_LIBRARY, LIBAIPUDRV_LIBRARY, NAME


def installed_library() -> Path:
    """The library to use (the --library option's default)."""
    system = System(Path(os.environ.get("NPUCTL_ROOT") or "/"))
    libnoe, libaipudrv = system.exists(DEFAULT_LIBRARY), system.exists(LIBAIPUDRV_LIBRARY)
    if libaipudrv and (not libnoe or installed_for_platform(system, NAME).alternative_to):
        return system.path(LIBAIPUDRV_LIBRARY)
    return system.path(DEFAULT_LIBRARY)


def library_name(path: Path) -> str:
    """'libaipudrv' for a path that resolves to libaipudrv.so*, else 'libnoe'."""
    return "libaipudrv" if Path(os.path.realpath(path)).name.startswith("libaipudrv.") else "libnoe"
