"""images/<name>.yaml: what one container image holds, described once, in data."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from pipeline import schema
from pipeline.config import REPO_ROOT

from .errors import ExitCode, ImageError

IMAGES_DIR = REPO_ROOT / "images"
SCHEMA = IMAGES_DIR / "image.schema.json"  # what an image's description may hold
ARCHITECTURES = ("arm64", "amd64")


@dataclass(frozen=True)
class Wheels:
    requirements: Path  # pip's requirements file, every file pinned by its sha256
    target: str  # the folder in the image


@dataclass(frozen=True)
class Definition:
    name: str
    title: str
    description: str
    families: tuple[str, ...]
    suite: str
    architectures: tuple[str, ...]
    debs: tuple[str, ...]
    archive_packages: dict[str, tuple[str, ...]]
    wheels: Wheels | None
    size_limit_mb: int
    user_space: bool = False  # the families' wanted user-space builds (their descriptions')

    def stem(self, version: str, architecture: str) -> str:
        """The file name of this image's archive, SBOM and summary, without the suffix."""
        return f"{self.name}_{version}_{architecture}"

    def packages_for(self, architecture: str) -> tuple[str, ...]:
        return self.archive_packages.get(architecture, ())

    def suites_for(self, architecture: str) -> tuple[str, ...]:
        """The suite and every other suite a package is taken from (pkg/suite)."""
        others = {
            package.split("/", 1)[1]
            for package in self.packages_for(architecture)
            if "/" in package
        }
        return (self.suite, *sorted(others - {self.suite}))


def image_names(directory: Path = IMAGES_DIR) -> list[str]:
    return sorted(path.stem for path in directory.glob("*.yaml"))


def load(name: str, directory: Path = IMAGES_DIR) -> Definition:
    path = directory / f"{name}.yaml"
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ImageError(
            f"no image {name!r}: images/ describes {', '.join(image_names(directory))}",
            ExitCode.USAGE,
        ) from None
    except (OSError, yaml.YAMLError) as error:
        raise ImageError(f"cannot read {path}: {error}", ExitCode.USAGE) from None
    problem = schema.problem(data, SCHEMA)
    if problem:
        raise ImageError(f"{path}: {problem}", ExitCode.USAGE)
    if data["name"] != name:
        raise ImageError(f"{path}: name is {data['name']!r}, not {name!r}", ExitCode.USAGE)
    wheels = data["wheels"]
    return Definition(
        name=data["name"],
        title=data["title"],
        description=" ".join(data["description"].split()),
        families=tuple(data["families"]),
        suite=data["suite"],
        architectures=tuple(data["architectures"]),
        debs=tuple(data["debs"]),
        archive_packages={
            arch: tuple(packages) for arch, packages in data["archive_packages"].items()
        },
        wheels=Wheels(directory / wheels["requirements"], wheels["target"]) if wheels else None,
        size_limit_mb=data["size_limit_mb"],
        user_space=bool(data.get("user_space", False)),
    )
