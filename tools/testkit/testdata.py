"""Test data from PyPI packages, pinned by sha256 and cached; nothing is committed."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from pipeline.fetch import cache_root


@dataclass(frozen=True)
class Wheel:
    requirement: str  # name==version
    filename: str
    sha256: str


CLIP_ANYTORCH = Wheel(
    "clip-anytorch==2.6.0",
    "clip_anytorch-2.6.0-py3-none-any.whl",
    "ebc0afed243851b9dc7e16ab8afb665237e8a5838986e97cd99f123ae4ce94ce",
)
YOLOV5 = Wheel(
    "yolov5==7.0.14",
    "yolov5-7.0.14-py37.py38.py39.py310-none-any.whl",
    "67d0e3f7cb055cc7ff0c9d66fc993577f7394ca83a16ab097c0343ee4db3ca4b",
)

CLIP_VOCAB_SHA256 = "924691ac288e54409236115652ad4aa250f48203de50a9e4722a6ecd48d6804a"
BUS_JPG_SHA256 = "33b198a1d2839bb9ac4c65d61f9e852196793cae9a0781360859425f6022b69c"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def wheel_member(wheel: Wheel, member: str, sha256: str | None = None) -> Path:
    """A file from a pinned PyPI wheel (downloaded once into the cache), or a skip."""
    directory = cache_root() / "test-data"
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / wheel.filename
    if not path.exists():
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "-q",
                "--no-deps",
                wheel.requirement,
                "-d",
                str(directory),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0 or not path.exists():
            pytest.skip(f"test data {wheel.requirement} could not be downloaded from PyPI")
    if _sha256(path) != wheel.sha256:
        path.unlink()
        pytest.fail(f"{wheel.filename} does not have the pinned sha256")
    target = directory / wheel.filename.split("-")[0] / member
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(path) as archive:
            target.write_bytes(archive.read(member))
    if sha256 is not None and _sha256(target) != sha256:
        pytest.fail(f"{member} from {wheel.filename} does not have the pinned sha256")
    return target
