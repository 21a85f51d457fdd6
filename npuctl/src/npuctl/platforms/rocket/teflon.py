"""Mesa's Teflon as the rocket family knows it (teflon.yaml): the Debian builds npuctl was
checked against and what each Mesa release computes wrongly on the RK3588's NPU, for the
doctor's finding about the installed release and for provisioning the wanted one."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING

import yaml
from jsonschema import Draft202012Validator

if TYPE_CHECKING:
    from npuctl.system import System


@dataclass(frozen=True)
class Wrong:
    """Something a Mesa release computes wrongly: what, the models it touches, which of
    npuctl's served models are among them, and the tests of Mesa's lists that show it on
    real boards (hardware.yaml)."""

    id: str  # the same in every release that computes it wrongly
    what: str
    models: str
    served: tuple[str, ...]
    evidence: tuple[str, ...]


@dataclass(frozen=True)
class Teflon:
    package: str
    minimum: tuple[int, int]
    wanted: str  # the Debian version a board should have
    repository_suite: str  # where the project's apt repository carries it
    builds: tuple[dict, ...]  # each build's version, suite and pinned .debs
    releases: dict[tuple[int, int], tuple[Wrong, ...]]

    @property
    def wanted_release(self) -> tuple[int, int]:
        found = release(self.wanted)
        assert found is not None, self.wanted
        return found

    def wrong_in(self, version: str | None) -> tuple[Wrong, ...] | None:
        """What the installed version's release is known to compute wrongly; None where this
        npuctl does not know the release."""
        found = release(version)
        return None if found is None else self.releases.get(found)

    def fixed_by_wanted(self, version: str | None) -> tuple[Wrong, ...]:
        """What the installed version's release computes wrongly and the wanted one right."""
        still = {item.id for item in self.releases.get(self.wanted_release, ())}
        return tuple(item for item in self.wrong_in(version) or () if item.id not in still)

    def build(self, version: str) -> dict:
        return next(build for build in self.builds if build["version"] == version)


def release(version: str | None) -> tuple[int, int] | None:
    """Mesa's major and minor release from a Debian version ("1:26.1.6-1~bpo13+1")."""
    numbers = re.match(r"^(?:\d+:)?(\d+)\.(\d+)", version or "")
    return (int(numbers[1]), int(numbers[2])) if numbers else None


@cache
def description() -> Teflon:
    """teflon.yaml, checked against its schema (a broken file is this package's bug)."""
    folder = resources.files(__package__)
    document = yaml.safe_load(folder.joinpath("teflon.yaml").read_text(encoding="utf-8"))
    schema = json.loads(folder.joinpath("teflon.schema.json").read_text(encoding="utf-8"))
    Draft202012Validator(schema).validate(document)
    minimum = release(str(document["minimum"]))
    assert minimum is not None
    return Teflon(
        package=str(document["package"]),
        minimum=minimum,
        wanted=str(document["wanted"]),
        repository_suite=str(document["repository_suite"]),
        builds=tuple(document["builds"]),
        releases={
            _release_key(key): tuple(
                Wrong(
                    str(item["id"]),
                    str(item["what"]),
                    str(item["models"]),
                    tuple(item["served"]),
                    tuple(item["evidence"]),
                )
                for item in entry["wrong"]
            )
            for key, entry in document["releases"].items()
        },
    )


def _release_key(key: str) -> tuple[int, int]:
    found = release(str(key))
    assert found is not None, key
    return found


def installed(system: System) -> str | None:
    """The Debian version of the Teflon package installed on the system."""
    result = system.run("dpkg-query", "-W", "-f=${Version}", description().package)
    return result.stdout.strip() if result and result.ok and result.stdout.strip() else None


def _policy(system: System) -> str:
    result = system.run("apt-cache", "policy", description().package)
    return result.stdout if result is not None and result.ok else ""


def candidate(system: System) -> str | None:
    """The version 'apt install' would bring, by the system's sources and pins."""
    found = re.search(r"^\s*Candidate:\s*(\S+)", _policy(system), re.MULTILINE)
    return found[1] if found and found[1] != "(none)" else None


def available(system: System) -> list[str]:
    """Every version the system's sources offer (apt-cache policy's version table), whatever
    their priority: a suite like trixie-teflon is not used until pinned."""
    return re.findall(r"^\s+(?:\*\*\* )?(\d\S*) -?\d+$", _policy(system), re.MULTILINE)
