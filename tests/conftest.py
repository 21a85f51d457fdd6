"""Shared fixtures. Tests that need the upstream driver tree or Debian chroots skip with the
reason and the command that makes them run."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from pipeline.config import Config, load_config, load_package
from pipeline.fetch import cache_root, find_upstream


@pytest.fixture(scope="session")
def config() -> Config:
    return load_config()


@pytest.fixture(scope="session")
def upstream_tree(config: Config) -> Path:
    tree = find_upstream(config)
    if tree is None:
        pytest.skip(
            f"upstream driver tree {config.upstream.tree_id[:12]} is not in the cache "
            f"({cache_root()}/upstream): run 'make fetch' (UPSTREAM_GIT=<clone> to use a "
            "local copy)"
        )
    return tree


@pytest.fixture(scope="session")
def built_packages(config: Config, upstream_tree: Path, tmp_path_factory) -> dict[str, Path]:
    """The Debian packages built once per session (lintian runs as part of the build)."""
    from pipeline.package import build_packages

    build_dir = tmp_path_factory.mktemp("build")
    dist = tmp_path_factory.mktemp("dist")
    artifacts = build_packages(config, upstream_tree, build_dir, dist)

    def one(suffix: str) -> Path:
        return next(path for path in artifacts if path.name.endswith(suffix))

    return {
        "dsc": one(".dsc"),
        "deb": one("_all.deb"),
        "orig": one(".orig.tar.xz"),
        "debian": one(".debian.tar.xz"),
        "changes": one(".changes"),
        "build_dir": build_dir,
    }


@pytest.fixture(scope="session")
def npuctl_debs(config: Config, tmp_path_factory) -> dict[str, Path]:
    """The .debs of npuctl's source (npuctl, npuctl-serve, npuctl-watch) by package name,
    built once per session (they need no upstream tree)."""
    from pipeline.npuctl_package import build_npuctl_package

    artifacts = build_npuctl_package(
        config, tmp_path_factory.mktemp("npuctl-build"), tmp_path_factory.mktemp("npuctl-dist")
    )
    return {path.name.split("_")[0]: path for path in artifacts if path.suffix == ".deb"}


@pytest.fixture(scope="session")
def npuctl_deb(npuctl_debs: dict[str, Path]) -> Path:
    """The npuctl core .deb."""
    return npuctl_debs["npuctl"]


@pytest.fixture(scope="session")
def rocket_config() -> Config:
    return load_package("rocket-dkms")


@pytest.fixture(scope="session")
def rocket_packages(rocket_config: Config, tmp_path_factory) -> dict[str, Path]:
    """rocket-dkms built once per session: file name -> path of each artifact."""
    from pipeline.package import build_packages

    tree = find_upstream(rocket_config)
    if tree is None:
        pytest.skip(
            f"rocket source {rocket_config.upstream.tree_id[:12]} is not in the cache "
            f"({cache_root()}/upstream): run 'make fetch' (downloads "
            f"{rocket_config.upstream.source_file} from the Debian archive once)"
        )
    artifacts = build_packages(
        rocket_config, tree, tmp_path_factory.mktemp("rocket"), tmp_path_factory.mktemp("rdist")
    )
    return {path.name: path for path in artifacts}


def require_chroot_support() -> None:
    if os.geteuid() != 0:
        pytest.skip("chroot tests need root (debootstrap, chroot, mount)")
    missing = [tool for tool in ("debootstrap", "chroot", "zstd") if not shutil.which(tool)]
    if missing:
        pytest.skip(f"chroot tests need {', '.join(missing)}: run 'make deps'")


def run(*command: str | Path, **kwargs) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(part) for part in command], capture_output=True, text=True, check=False, **kwargs
    )
