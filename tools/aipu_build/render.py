"""Render the Jinja templates (dkms/, debian/, provision/) from one context built from aipu.yaml."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import jinja2

from .atomic import write_atomically
from .config import REPO_ROOT, Config

DKMS_TEMPLATE = REPO_ROOT / "dkms" / "dkms.conf.j2"
TEMPLATE_SUFFIX = ".j2"

_COPYRIGHT = re.compile(
    r"Copyright\s+(?:\([cC]\)\s*)?(?P<first>\d{4})(?:\s*-\s*(?P<last>\d{4}))?\s+"
    r"(?P<holder>.+?)\s*(?:All Rights Reserved\.?)?\s*(?:\*/)?\s*$"
)
_SOURCE_SUFFIXES = {".c", ".h"}
_SOURCE_NAMES = {"Makefile", "Kbuild", "Kconfig"}


def template_context(config: Config, upstream_tree: Path | None = None) -> dict[str, Any]:
    """Every value any template may use, derived in this one place."""
    return {
        "config": config,
        "name": config.name,
        "module": config.module,
        "version": config.version,
        "debian_version": config.debian_version,
        "maintainer": config.maintainer,
        "homepage": config.homepage,
        "appstream_id": config.appstream_id,
        "summary": config.summary,
        "takes_over": list(config.takes_over),
        "upstream": config.upstream,
        "kernel_min": config.kernel_min,
        "kernel_tested_max": config.kernel_tested_max,
        "kernel_regex": config.kernel_regex,
        "config_gate": config.kernel_config_gate,
        "device": {
            "node": config.device_node,
            "group": config.device_group,
            "mode": config.device_mode,
        },
        "upstream_copyrights": upstream_copyrights(upstream_tree) if upstream_tree else [],
        "patches": _series_summaries(),
        "description": _long_description(config),
    }


def _long_description(config: Config) -> str:
    """debian/control's extended description as one string (the template wraps it)."""
    return (
        f"Source of the {config.module} kernel module for the ArmChina Zhouyi V3 neural "
        "processing unit of the CIX CD8180 (Sky1) SoC, as on the Orange Pi 6 Plus. DKMS "
        f"builds it for every installed arm64 kernel from {config.kernel_min} on, and "
        "again when the headers of a new kernel are installed; a kernel the driver cannot "
        "support is skipped instead of making the installation fail. The upstream driver "
        f"(KMD {config.upstream_version}, snapshot {config.upstream.commit[:7]}) is carried "
        f"with patches for Linux {config.kernel_min} to {config.kernel_tested_max} and a fix "
        "for the second inference hanging. A udev rule gives the "
        f"{config.device_group} group and the logged-in user access to "
        f"/dev/{config.device_node}; udev loads the module when the firmware describes the "
        "NPU (by its ACPI and device-tree aliases). This package replaces "
        f"{' and '.join(config.takes_over)}, which build the same module."
    )


def upstream_copyrights(tree: Path) -> list[str]:
    """'YEARS HOLDER' lines from the upstream sources' own notices, one per holder."""
    years: dict[str, set[int]] = {}
    for path in sorted(tree.rglob("*")):
        if not path.is_file() or (
            path.suffix not in _SOURCE_SUFFIXES and path.name not in _SOURCE_NAMES
        ):
            continue
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            match = _COPYRIGHT.search(line)
            if match:
                first = int(match["first"])
                last = int(match["last"] or first)
                years.setdefault(match["holder"].rstrip(" ."), set()).update({first, last})
    return [f"{_years(sorted(found))} {holder}" for holder, found in sorted(years.items())]


def _years(found: list[int]) -> str:
    return str(found[0]) if found[0] == found[-1] else f"{found[0]}-{found[-1]}"


def _series_summaries() -> list[dict[str, str]]:
    """Name and one-line description of each patch, for the changelog."""
    from .patching import PATCHES_DIR, series

    summaries = []
    for name in series():
        text = (PATCHES_DIR / name).read_text(encoding="utf-8")
        match = re.search(r"^Description: (.+)$", text, re.MULTILINE)
        summaries.append({"name": name, "description": match[1] if match else name})
    return summaries


def _environment(search_path: Path) -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(search_path)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )


def render_file(template: Path, context: dict[str, Any]) -> str:
    return _environment(template.parent).get_template(template.name).render(context)


def write_dkms_conf(config: Config, destination: Path) -> None:
    write_atomically(destination, render_file(DKMS_TEMPLATE, template_context(config)))


def render_tree(source: Path, destination: Path, context: dict[str, Any]) -> list[Path]:
    """Copy ``source`` to ``destination``: ``*.j2`` files rendered, others copied as they are."""
    written = []
    for path in _files(source):
        relative = path.relative_to(source)
        mode = path.stat().st_mode & 0o777
        if path.suffix == TEMPLATE_SUFFIX:
            target = destination / relative.with_suffix("")
            text = render_file(path, context)
        else:
            target = destination / relative
            text = path.read_text(encoding="utf-8")
        write_atomically(target, text, mode)
        written.append(target)
    return written


def _files(source: Path) -> Iterable[Path]:
    return sorted(path for path in source.rglob("*") if path.is_file())
