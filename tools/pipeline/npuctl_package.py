"""The npuctl Debian package: a native source package of the npuctl/ project, with debian/
rendered from debian/npuctl/."""

from __future__ import annotations

import shutil
import tomllib
from pathlib import Path

from .atomic import replaced_directory
from .config import REPO_ROOT, Config, load_package, package_names
from .npuctl_drivers import check as check_drivers_data
from .package import dpkg_buildpackage
from .render import render_file, render_tree
from .tools import require_tool

NPUCTL = REPO_ROOT / "npuctl"
SERVE_UNIT = REPO_ROOT / "provision" / "npuctl-serve" / "npuctl-serve.service.j2"
# The binary packages of the npuctl source: the core and the parts with packages of their own.
BINARY_PACKAGES = ("npuctl", "npuctl-serve", "npuctl-watch")


def npuctl_version() -> str:
    with (NPUCTL / "pyproject.toml").open("rb") as stream:
        return str(tomllib.load(stream)["project"]["version"])


def debian_version(config: Config) -> str:
    """npuctl's own version; ``+<suffix>`` for the later version upgrade tests install."""
    version = npuctl_version()
    return f"{version}+{config.local_suffix}" if config.local_suffix else version


def _context(config: Config, version: str) -> dict[str, object]:
    return {
        "version": version,
        "maintainer": config.maintainer,
        "homepage": config.project_homepage,
        "distribution": config.changelog_distribution,
        # The board's NPU driver, whichever family: every driver package of dkms/ but an
        # alternative driver line, which is never what apt picks for a Recommends.
        "driver_packages": [
            name for name in package_names() if not load_package(name).alternative_to
        ],
        "descriptions": _descriptions(),
    }


def _descriptions() -> dict[str, str]:
    """The packages' descriptions, naming each NPU as its driver's description does."""
    # One description per NPU family, however many driver lines it has.
    configs = [load_package(name) for name in package_names()]
    named = list({config.npuctl_platform: config.npuctl_description for config in configs}.values())
    npus = " and ".join(str(entry["npu"]) for entry in named)
    boards = " or ".join(str(entry["board"]) for entry in named)
    models = [str(model) for entry in named for model in entry["models"]]
    listed = ", ".join(models[:-1]) + f" and {models[-1]}" if len(models) > 1 else models[0]
    return {
        "npuctl": (
            "npuctl proves that the NPU of an ARM board really computes, and says what is "
            f"wrong when it does not: {npus}. npuctl doctor checks the whole stack with a fix "
            f"under every finding; npuctl run and bench run and time {listed} on the NPU; "
            "npuctl models downloads and verifies the models it knows by name; npuctl "
            "provision finishes the board set-up; npuctl cdi and k8s bring the NPU to "
            "containers and K3s nodes."
        ),
        "serve": (
            f"npuctl serve answers inference requests on the NPU of {boards} over HTTP and a "
            "unix socket: OpenAI-compatible embeddings, Prometheus metrics, systemd readiness "
            "and watchdog. It comes with a hardened systemd unit, npuctl-serve.service, "
            "installed but not enabled."
        ),
        "watch": (
            "npuctl watch samples this machine's metrics (CPU, memory, load, disks), turns "
            "them into text, embeds it, in-process or through npuctl serve, on the NPU of "
            f"{boards}, and reports samples unlike the recent ones."
        ),
    }


def device_allow(device: dict[str, str]) -> str:
    """A driver's device node as systemd's DeviceAllow= names it: its path, or, where the
    node is a pattern (accel/accel*), every character device of its subsystem."""
    node = device["node"]
    if any(mark in node for mark in "*?["):
        return f"char-{device['subsystem']}"
    return f"/dev/{node}"


def serve_unit() -> str:
    """npuctl-serve.service, allowed the device node of every NPU a driver package serves."""
    configs = [load_package(name) for name in package_names()]
    return render_file(
        SERVE_UNIT,
        {
            "device_nodes": [(config.name, config.device["node"]) for config in configs],
            "device_allow": list(dict.fromkeys(device_allow(c.device) for c in configs)),
        },
    )


def npuctl_source_tree(config: Config, build_dir: Path) -> Path:
    version = debian_version(config)
    destination = build_dir / f"npuctl-{version}"
    with replaced_directory(destination) as tree:
        shutil.copytree(
            NPUCTL,
            tree,
            ignore=shutil.ignore_patterns("debian", "__pycache__", "*.egg-info", "build"),
        )
        render_tree(REPO_ROOT / "debian" / "npuctl", tree / "debian", _context(config, version))
        # The unit is a board-side file of provision/, like the drivers' udev rules.
        (tree / "debian" / SERVE_UNIT.stem).write_text(serve_unit(), encoding="utf-8")
    return destination


def build_npuctl_package(
    config: Config, build_dir: Path, dist: Path, *, lintian: bool = True
) -> list[Path]:
    for tool in ("dpkg-buildpackage", "dh", "lintian"):
        require_tool(tool)
    check_drivers_data()
    build_dir = build_dir.resolve()
    build_dir.mkdir(parents=True, exist_ok=True)
    tree = npuctl_source_tree(config, build_dir)
    stem = f"npuctl_{debian_version(config)}"
    artifacts = [
        build_dir / f"{stem}.dsc",
        build_dir / f"{stem}.tar.xz",
        *(build_dir / f"{name}_{debian_version(config)}_all.deb" for name in BINARY_PACKAGES),
    ]
    return dpkg_buildpackage(tree, stem, artifacts, dist, lintian=lintian)
