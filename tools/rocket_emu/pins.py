"""emulation/rk3588.yaml: every pinned input of the emulated board, read once."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import yaml

from pipeline import schema
from pipeline.config import REPO_ROOT, load_package

from .errors import EmulationError, ExitCode, Stage

PINS = REPO_ROOT / "emulation" / "rk3588.yaml"
SCHEMA = REPO_ROOT / "emulation" / "board.schema.json"  # what a board's pins may hold
DRIVER_PACKAGE = "rocket-dkms"  # whose description names the board's user space (Teflon)


def _teflon_builds() -> list[dict]:
    """The Teflon builds the RK3588 family knows, each with its pinned .debs."""
    described = load_package(DRIVER_PACKAGE).user_space
    assert described is not None, f"dkms/{DRIVER_PACKAGE}.yaml names no user_space"
    return list(yaml.safe_load(described.read_text(encoding="utf-8"))["builds"])


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

    @property
    def teflons(self) -> list[dict]:
        """The Teflons the cases run under, in turn (the first is in the cached root): the
        builds of the family's teflon.yaml, with their pinned .debs."""
        builds = {str(build["version"]): build for build in _teflon_builds()}
        return [builds[str(version)] for version in self.guest["teflons"]]

    @property
    def teflon_versions(self) -> list[str]:
        return [str(version) for version in self.guest["teflons"]]

    def expectation(self, case: dict, teflon: str) -> str:
        """ "agree" or "differs": the case's verdict under that Teflon."""
        expect = case["expect"]
        return str(expect[teflon] if isinstance(expect, dict) else expect)

    def causes(self, case: dict, teflon: str) -> list[str]:
        """Why the case differs under that Teflon (checked by the tests against the run)."""
        return list(case.get("explained", {}).get(teflon, ()))

    def observed(self, case: dict, teflon: str) -> str | None:
        """What an expected difference looked like when it was last seen under that Teflon."""
        observed = case.get("observed")
        return observed.get(teflon) if isinstance(observed, dict) else observed

    def patches(self, key: str) -> Path:
        section = self.qemu if key == "qemu" else self.emulator["guest_helper"]
        return REPO_ROOT / section["patches"]


def load(path: Path = PINS) -> Pins:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as error:
        raise EmulationError(Stage.INPUTS, f"cannot read {path}: {error}", ExitCode.USAGE) from None
    problem = schema.problem(data, SCHEMA) or _case_problem(Pins(data))
    if problem:
        raise EmulationError(Stage.INPUTS, f"{path}: {problem}", ExitCode.USAGE)
    return Pins(data)


def _capture_problem(pins: Pins, versions: list[str]) -> str | None:
    """A real board's capture expects something under every Teflon the board runs."""
    for capture in pins.data.get("peer_suite", {}).get("captures", []):
        if sorted(capture["expect"]) != sorted(versions):
            named = sorted(capture["expect"])
            return f"capture {capture['name']}: expect names {named}, not {versions}"
    return None


def _case_problem(pins: Pins) -> str | None:
    """A case's expectations name every Teflon (or none), and an expected difference says
    what it looked like under its Teflon."""
    versions = pins.teflon_versions
    known = [str(build["version"]) for build in _teflon_builds()]
    if not set(versions) <= set(known):
        return f"guest.teflons: {versions}, but the family's teflon.yaml has builds {known}"
    problem = _capture_problem(pins, versions)
    if problem:
        return problem
    for case in pins.data["golden_cases"]:
        expect, observed = case["expect"], case.get("observed")
        if isinstance(expect, dict) and sorted(expect) != sorted(versions):
            return f"golden case {case['name']}: expect names {sorted(expect)}, not {versions}"
        if isinstance(observed, dict) and not set(observed) <= set(versions):
            return f"golden case {case['name']}: observed names {sorted(observed)}, not {versions}"
        blind_spots = case.get("blind_spots", {})
        if not set(blind_spots) <= set(versions):
            return f"golden case {case['name']}: blind_spots names {sorted(blind_spots)}"
        unknown = {name for names in blind_spots.values() for name in names} - set(
            pins.data.get("blind_spots", {})
        )
        if unknown:
            return f"golden case {case['name']}: blind spots not described: {sorted(unknown)}"
        explained = case.get("explained", {})
        if not set(explained) <= set(versions):
            return (
                f"golden case {case['name']}: explained names {sorted(explained)}, not {versions}"
            )
        for version in versions:
            differs = pins.expectation(case, version) == "differs"
            if differs and not pins.observed(case, version):
                return f"golden case {case['name']}: differs under {version} without 'observed'"
            if differs != (version in explained):
                return (
                    f"golden case {case['name']}: under {version} an expected difference "
                    "and only one needs its causes ('explained')"
                )
    return None


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
