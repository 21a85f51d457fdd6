"""Apply a package's quilt series (patches/<name>/) to a copy of its verified
upstream tree."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from .atomic import replaced_directory
from .config import REPO_ROOT
from .errors import BuildError, ExitCode
from .tools import last_line, run

QUILTRC = REPO_ROOT / "tools" / "quiltrc"


def series(patches_dir: Path) -> list[str]:
    if not (patches_dir / "series").exists():  # a package that needs no patch
        return []
    lines = (patches_dir / "series").read_text(encoding="utf-8").splitlines()
    return [line.split()[0] for line in lines if line.strip() and not line.startswith("#")]


def quilt_env(patches_dir: Path) -> dict[str, str]:
    return {**os.environ, "QUILT_PATCHES": str(patches_dir.resolve()), "QUILT_PC": ".pc"}


def quilt(tree: Path, *args: str, patches_dir: Path) -> subprocess.CompletedProcess[str]:
    return run(
        ["quilt", "--quiltrc", QUILTRC, *args],
        cwd=tree,
        env=quilt_env(patches_dir),
        check=False,
        failure=f"quilt {args[0] if args else ''}",
        code=ExitCode.PATCH,
    )


def apply_series(tree: Path, patches_dir: Path) -> None:
    """``quilt push -a`` with zero fuzz; a patch that does not apply is a one-line error."""
    if not series(patches_dir):
        return
    result = quilt(tree, "push", "-a", "--fuzz=0", "-q", patches_dir=patches_dir)
    if result.returncode != 0:
        failing = re.findall(r"Applying patch (?:patches/)?(\S+)", result.stdout)
        name = failing[-1] if failing else "?"
        detail = last_line(result.stdout + "\n" + result.stderr)
        raise BuildError(
            f"patch {name} does not apply to upstream {tree.name} ({detail}): refresh it "
            "with 'make quilt-tree'",
            ExitCode.PATCH,
        )


def patched_copy(upstream: Path, destination: Path, patches_dir: Path) -> Path:
    """Write upstream + series to ``destination`` (replaced atomically; no .pc left)."""
    with replaced_directory(destination) as tree:
        shutil.copytree(upstream, tree, symlinks=True)
        apply_series(tree, patches_dir)
        shutil.rmtree(tree / ".pc", ignore_errors=True)
    return destination
