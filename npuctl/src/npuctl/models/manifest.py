"""The model manifest: what npuctl knows by name, merged from every platform's models.yaml
(or one file named by NPUCTL_MANIFEST)."""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import yaml
from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match

from ..drivers import all_drivers
from ..errors import ExitCode, NpuctlError


@dataclass(frozen=True)
class TensorExpectation:
    elements: int
    dtype: str | None = None


@dataclass(frozen=True)
class FrigateFacts:
    """How Frigate's zmq detector uses a model: what its frames' headers say, how its
    model block is set, and the other names its model.path may end in."""

    model_type: str  # Frigate's ModelTypeEnum name (ssd, yologeneric, ...)
    input_tensor: str  # nhwc | nchw
    input_pixel_format: str  # rgb | bgr
    labelmap: str  # the labelmap Frigate's container ships for the model's class ids
    names: tuple[str, ...] = ()


@dataclass(frozen=True)
class Entry:
    """A model or an asset (a file a model needs)."""

    name: str
    kind: str  # model | asset
    description: str
    file: str
    url: str
    sha256: str | None
    size: int | None = None
    approx_mb: float | None = None
    needs: tuple[str, ...] = ()
    inputs: tuple[TensorExpectation, ...] = field(default_factory=tuple)
    outputs: tuple[TensorExpectation, ...] = field(default_factory=tuple)
    platform: str | None = None  # the NPU family that runs it
    immich: str | None = None  # the name Immich's machine learning asks for it by
    frigate: FrigateFacts | None = None  # how Frigate's zmq detector uses it


@dataclass(frozen=True)
class Manifest:
    entries: dict[str, Entry]

    def get(self, name: str) -> Entry:
        try:
            return self.entries[name]
        except KeyError:
            known = ", ".join(sorted(self.entries))
            raise NpuctlError(f"unknown model {name!r}; known: {known}", ExitCode.USAGE) from None

    def model(self, name: str) -> Entry:
        """A model to run: assets (files that models need) are refused, exit 2."""
        entry = self.get(name)
        if entry.kind != "model":
            runnable = ", ".join(e.name for e in self.models)
            raise NpuctlError(
                f"{name} is not a model but a file models need; models: {runnable}",
                ExitCode.USAGE,
            )
        return entry

    @property
    def models(self) -> list[Entry]:
        return [entry for entry in self.entries.values() if entry.kind == "model"]

    def models_of(self, platform: str | None) -> list[Entry]:
        """The models of one NPU family; every model when the family is not known."""
        return [m for m in self.models if platform is None or m.platform in (None, platform)]

    def with_needs(self, names: list[str]) -> list[Entry]:
        """The named entries and everything they need, each once, needs first."""
        ordered: list[Entry] = []
        for name in names:
            entry = self.get(name)
            for need in entry.needs:
                if self.get(need) not in ordered:
                    ordered.append(self.get(need))
            if entry not in ordered:
                ordered.append(entry)
        return ordered


def manifest_paths() -> list[Path]:
    explicit = os.environ.get("NPUCTL_MANIFEST")
    if explicit:
        return [Path(explicit)]
    # Each family's models.yaml, read where its package is: knowing which families there
    # are needs the drivers' descriptions, not the families themselves.
    platforms = resources.files("npuctl") / "platforms"
    names = dict.fromkeys(driver.platform for driver in all_drivers())
    return [Path(str(platforms / name / "models.yaml")) for name in names]


def _frigate(item: dict | None) -> FrigateFacts | None:
    if item is None:
        return None
    return FrigateFacts(
        item["model_type"],
        item["input_tensor"],
        item["input_pixel_format"],
        item["labelmap"],
        tuple(item.get("names") or ()),
    )


def _tensors(items: list[dict] | None) -> tuple[TensorExpectation, ...]:
    return tuple(TensorExpectation(item["elements"], item.get("dtype")) for item in items or [])


def load_manifest(paths: list[Path] | None = None) -> Manifest:
    entries: dict[str, Entry] = {}
    for path in paths or manifest_paths():
        entries.update(_load(path))
    return Manifest(entries)


def _load(path: Path) -> dict[str, Entry]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as error:
        raise NpuctlError(f"cannot read the model manifest {path}: {error}") from error
    problem = _problem(data)
    if problem:
        raise NpuctlError(f"the model manifest {path}: {problem}", ExitCode.USAGE)
    entries: dict[str, Entry] = {}
    for kind, section in (("model", "models"), ("asset", "assets")):
        for name, item in (data.get(section) or {}).items():
            entries[name] = Entry(
                name=name,
                kind=kind,
                description=item.get("description", ""),
                file=item["file"],
                url=item["url"],
                sha256=item.get("sha256"),
                size=item.get("size"),
                approx_mb=item.get("approx_mb"),
                needs=tuple(item.get("needs") or ()),
                inputs=_tensors(item.get("inputs")),
                outputs=_tensors(item.get("outputs")),
                platform=item.get("platform", data.get("platform")),
                immich=item.get("immich"),
                frigate=_frigate(item.get("frigate")),
            )
    return entries


@functools.cache
def _validator() -> Draft202012Validator:
    schema = resources.files(__package__) / "manifest.schema.json"
    return Draft202012Validator(json.loads(schema.read_text(encoding="utf-8")))


def _problem(data: object) -> str | None:
    """What is wrong with a manifest, in one line naming the field, or None."""
    error = best_match(_validator().iter_errors(data))
    if error is None:
        return None
    field = ".".join(str(part) for part in error.absolute_path)
    within = f"{field}." if field else ""
    instance = error.instance
    if error.validator == "required" and isinstance(instance, dict):
        missing = next(name for name in error.validator_value if name not in instance)
        return f"{within}{missing}: missing: add it"
    if error.validator == "additionalProperties" and isinstance(instance, dict):
        known = sorted(error.schema.get("properties", {}))
        unknown = next(name for name in instance if name not in known)
        return f"{within}{unknown}: not a field here (known: {', '.join(known)})"
    allowed = error.schema.get("description") if isinstance(error.schema, dict) else None
    if allowed and error.validator in ("pattern", "type"):
        return f"{field or 'the top level'}: {str(instance)[:80]!r} is not {allowed}"
    return f"{field or 'the top level'}: {error.message[:200]}"
