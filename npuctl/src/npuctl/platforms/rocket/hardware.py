"""What real RK3588 boards compute (hardware.yaml): Mesa's expectations for its Teflon tests,
which its CI runs on real boards, per Mesa release, read at the Mesa commit each names. A
test in none of the lists passes there; a skipped one says nothing."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources

import yaml
from jsonschema import Draft202012Validator

from .teflon import release as release_of

WHOLE = "whole"  # the whole file's test, beside the operations' numbers


@dataclass(frozen=True)
class ModelEvidence:
    """One of Mesa's test models on the boards under one release."""

    name: str  # as Mesa's test data names it (Models.Op/<name>_...)
    file: str
    whole: str  # pass, fail, skip or crash
    fail: frozenset[str]
    skip: frozenset[str]
    crash: frozenset[str]

    def verdict(self, operation: str = WHOLE) -> str:
        """The boards' verdict on the whole file or on one operation (its three digits)."""
        if operation == WHOLE:
            return self.whole
        if operation in self.skip:  # a skipped test does not run, listed as failing or not
            return "skip"
        if operation in self.crash:
            return "crash"
        return "fail" if operation in self.fail else "pass"

    def test(self, operation: str = WHOLE) -> str:
        """The test's name in Mesa's lists."""
        return f"Models.Op/{self.name}_{self.file if operation == WHOLE else operation}"


@dataclass(frozen=True)
class ReleaseEvidence:
    tag: str
    at_tag: bool  # whether the lists were read at the tag's own commit
    lists: dict[str, dict]  # fails, skips, flakes: path and commit
    models: dict[str, ModelEvidence]


@dataclass(frozen=True)
class Evidence:
    repository: str
    tolerance: int
    releases: dict[tuple[int, int], ReleaseEvidence]
    served: dict[str, str]  # npuctl's served model -> Mesa's test model

    def of(self, version: str | None) -> ReleaseEvidence | None:
        """The evidence for a Teflon version's Mesa release, None where there is none."""
        found = release_of(version)
        return None if found is None else self.releases.get(found)

    def served_verdict(self, version: str | None, served: str) -> str | None:
        """The boards' verdict on one of npuctl's served models, whole, under the release of
        a Teflon version; None where the evidence does not cover them."""
        found = self.of(version)
        model = self.served.get(served)
        if found is None or model is None or model not in found.models:
            return None
        return found.models[model].whole


@cache
def evidence() -> Evidence:
    """hardware.yaml, checked against its schema (a broken file is this package's bug)."""
    folder = resources.files(__package__)
    document = yaml.safe_load(folder.joinpath("hardware.yaml").read_text(encoding="utf-8"))
    schema = json.loads(folder.joinpath("hardware.schema.json").read_text(encoding="utf-8"))
    Draft202012Validator(schema).validate(document)
    releases = {}
    for key, entry in document["releases"].items():
        found = release_of(str(key))
        assert found is not None, key
        releases[found] = ReleaseEvidence(
            tag=str(entry["tag"]),
            at_tag=bool(entry["at_tag"]),
            lists=dict(entry["lists"]),
            models={
                name: ModelEvidence(
                    name,
                    str(model["file"]),
                    str(model["whole"]),
                    frozenset(model.get("fail", ())),
                    frozenset(model.get("skip", ())),
                    frozenset(model.get("crash", ())),
                )
                for name, model in entry["models"].items()
            },
        )
    return Evidence(
        repository=str(document["repository"]),
        tolerance=int(document["tolerance"]),
        releases=releases,
        served=dict(document["served"]),
    )
