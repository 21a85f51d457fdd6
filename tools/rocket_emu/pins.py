"""emulation/rk3588.yaml: every pinned input of the emulated board, read once."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import yaml

from pipeline import schema
from pipeline.config import REPO_ROOT

from .errors import EmulationError, ExitCode, Stage

PINS = REPO_ROOT / "emulation" / "rk3588.yaml"
SCHEMA = REPO_ROOT / "emulation" / "board.schema.json"  # what a board's pins may hold


@dataclass(frozen=True)
class Pins:
    data: dict

    @property
    def qemu(self) -> dict:
        return self.data["qemu"]

    @property
    def emulator(self) -> dict:
        return self.data["emulator"]

    @property
    def guest(self) -> dict:
        return self.data["guest"]

    @property
    def machine(self) -> dict:
        return self.data["machine"]

    @property
    def release(self) -> str:
        return str(self.guest["kernel"]["release"])

    def patches(self, key: str) -> Path:
        section = self.qemu if key == "qemu" else self.emulator["guest_helper"]
        return REPO_ROOT / section["patches"]


def load(path: Path = PINS) -> Pins:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as error:
        raise EmulationError(Stage.INPUTS, f"cannot read {path}: {error}", ExitCode.USAGE) from None
    problem = schema.problem(data, SCHEMA)
    if problem:
        raise EmulationError(Stage.INPUTS, f"{path}: {problem}", ExitCode.USAGE)
    return Pins(data)


def digest(*parts: object) -> str:
    """A cache key: the inputs' text and the bytes of the files among them."""
    hashing = hashlib.sha256()
    for part in parts:
        if isinstance(part, Path):
            for path in sorted(part.rglob("*")) if part.is_dir() else [part]:
                if path.is_file():
                    hashing.update(path.name.encode() + b"\0" + path.read_bytes())
        else:
            hashing.update(repr(part).encode())
        hashing.update(b"\1")
    return hashing.hexdigest()[:20]
