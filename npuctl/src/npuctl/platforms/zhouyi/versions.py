"""Version strings of the Zhouyi's drivers and libraries, read without the pair table (the
binding runs where only the standard library and numpy are installed)."""

from __future__ import annotations

import re


def series(version: str) -> str:
    """'5.11' of '5.11.0', '5.11.0-012345678' or '5.11.0+git20251022.66bfa0e-1'; '' if none."""
    match = re.match(r"\s*v?(\d+)\.(\d+)", version)
    return f"{match[1]}.{match[2]}" if match else ""


def umd_from_library_name(name: str, library: str = "libnoe") -> str:
    """'0.6.0' of libnoe.so.0.6.0 (the real file behind libnoe.so), '6.1.0' of
    libaipudrv.so.6.1.0 for library libaipudrv; '' otherwise."""
    match = re.fullmatch(rf"{re.escape(library)}\.so\.(\d+\.\d+\.\d+)", name)
    return match[1] if match else ""
