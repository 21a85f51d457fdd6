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
from .versions import umd_from_library_name


def installed_library() -> Path:
    """The library to use (the --library option's default)."""
    system = System(Path(os.environ.get("NPUCTL_ROOT") or "/"))
    libnoe, libaipudrv = system.exists(DEFAULT_LIBRARY), system.exists(LIBAIPUDRV_LIBRARY)
    if libaipudrv and (not libnoe or installed_for_platform(system, NAME).alternative_to):
        return system.path(LIBAIPUDRV_LIBRARY)
    return system.path(DEFAULT_LIBRARY)


def library_version(path: Path, system: System | None = None) -> str:
    """The library's version, learned before any of its commands: from the file its path
    resolves to (libaipudrv.so.6.1.0, libnoe.so.0.6.0), else, for the path its package
    installs, from that package (dpkg); '' when neither says. A libnoe known only by its
    package reads 'cix-noe-umd 3.1.3' where that package's UMD version is not known."""
    name = library_name(path)
    found = umd_from_library_name(Path(os.path.realpath(path)).name, name)
    if found:
        return found
    system = system or System(Path(os.environ.get("NPUCTL_ROOT") or "/"))
    package, installed = (
        ("cix-noe-umd", DEFAULT_LIBRARY)
        if name == "libnoe"
        else ("libaipudrv6", LIBAIPUDRV_LIBRARY)
    )
    if Path(path) != system.path(installed):
        return ""
    result = system.run("dpkg-query", "-W", "-f=${Version}", package)
    version = result.stdout.strip() if result and result.ok else ""
    if not version:
        return ""
    if name == "libnoe":
        from .driver_pairs import umd_from_package  # the pair table names CIX's packages

        return umd_from_package(version)
    upstream = version.split(":")[-1].split("+")[0].split("-")[0]
    return upstream if upstream.count(".") == 2 else ""


def library_name(path: Path) -> str:
    """'libaipudrv' for a path that resolves to libaipudrv.so*, else 'libnoe'."""
    return "libaipudrv" if Path(os.path.realpath(path)).name.startswith("libaipudrv.") else "libnoe"
