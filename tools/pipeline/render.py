"""Render the Jinja templates (dkms/dkms.conf.j2, debian/dkms/ and the package's board files
in provision/) from one context built from the package's dkms/<name>.yaml."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import jinja2

from .atomic import write_atomically
from .config import DKMS_DIR, Config
from .errors import BuildError, ExitCode

DKMS_TEMPLATE = DKMS_DIR / "dkms.conf.j2"
TEMPLATE_SUFFIX = ".j2"

_COPYRIGHT = re.compile(
    r"Copyright\s+(?:\([cC]\)\s*)?(?P<first>\d{4})(?:\s*-\s*(?P<last>\d{4}))?\s+"
    r"(?P<holder>.+?)\s*(?:All Rights Reserved\.?)?\s*(?:\*/)?\s*$"
)
# Others' notices in the files a package bundles, as their authors write them: "Copyright
# (C) 2001-present by HOLDER", "(c) 2007,2008, HOLDER <mail> (what they wrote)".
_BUNDLED_NOTICE = re.compile(
    r"(?:Copyright\s+(?:\([cC]\)\s*)?|\([cC]\)\s*)"
    r"(?P<years>\d{4}(?:\s*[-,]\s*(?:\d{4}|present))*),?\s+(?:by\s+)?"
    r"(?P<holder>.+?)[\s.]*(?:<[^>]*>)?\s*(?:\(.*\))?\s*(?:All Rights Reserved\.?)?\s*(?:\*/)?\s*$"
)
_LICENCE_TEXTS = ("LICENSE", "COPYING")  # their notices are the licence's authors'
_SOURCE_SUFFIXES = {".c", ".h"}
_SOURCE_NAMES = {"Makefile", "Kbuild", "Kconfig"}


def template_context(config: Config, upstream_tree: Path | None = None) -> dict[str, Any]:
    """Every value any template may use, derived in this one place."""
    context: dict[str, Any] = {
        "config": config,
        "name": config.name,
        "module": config.module,
        "version": config.version,
        "debian_version": config.debian_version,
        "maintainer": config.maintainer,
        "homepage": config.homepage,
        "appstream_id": config.appstream_id,
        "appstream": config.appstream,
        "modaliases": list(config.modaliases),
        "platform_driver": config.platform_driver,
        "board_files": list(config.board_files),
        "summary": config.summary,
        "takes_over": list(config.takes_over),
        "takes_over_relations": list(config.takes_over_relations),
        "upstream": config.upstream,
        "kernel_min": config.kernel_min,
        "kernel_tested_max": config.kernel_tested_max,
        "kernel_regex": config.kernel_regex,
        "config_gate": " ".join(config.kernel_config_gate),
        "install": list(config.install),
        "make_arguments": config.make_arguments,
        "device": config.device,
        "upstream_copyrights": _holders(config, upstream_tree) if upstream_tree else [],
        "patches": _series_summaries(config.patches_dir),
    }
    context["description"] = render_string(config.description, context)
    context["changelog_entry"] = render_string(config.changelog_entry, context)
    return context


def render_string(template: str, context: dict[str, Any]) -> str:
    environment = jinja2.Environment(undefined=jinja2.StrictUndefined, autoescape=False)
    return environment.from_string(template).render(context)


def _holders(config: Config, tree: Path) -> list[str]:
    found = upstream_copyrights(tree)
    if not found:
        raise BuildError(
            f"{config.name}: no 'Copyright <years> <holder>' notice in the upstream sources; "
            "debian/copyright names the holders from them",
            ExitCode.INPUT,
        )
    return found


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


def bundled_copyrights(tree: Path, files: str, later: list[str]) -> list[str]:
    """'YEARS HOLDER' lines from the notices in the files a debian/copyright stanza names
    (``files``: its patterns, relative to the tree), leaving out those a later stanza takes
    (``later``: their patterns; in debian/copyright the last match wins)."""
    years: dict[str, set[int]] = {}
    present: set[str] = set()
    for path in sorted(tree.rglob("*")):
        name = path.relative_to(tree).as_posix()
        if (
            not path.is_file()
            or path.name.upper().startswith(_LICENCE_TEXTS)
            or not _matches(name, files)
            or any(_matches(name, pattern) for pattern in later)
        ):
            continue
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            match = _BUNDLED_NOTICE.search(line)
            if not match:
                continue
            holder = match["holder"].rstrip(" .,")
            found = years.setdefault(holder, set())
            found.update(int(year) for year in re.findall(r"\d{4}", match["years"]))
            if "present" in match["years"]:
                present.add(holder)
    return [
        f"{f'{min(found)}-present' if holder in present else _years(sorted(found))} {holder}"
        for holder, found in sorted(years.items())
    ]


def _matches(name: str, patterns: str) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns.split())


def _years(found: list[int]) -> str:
    return str(found[0]) if found[0] == found[-1] else f"{found[0]}-{found[-1]}"


def _series_summaries(patches_dir: Path) -> list[dict[str, str]]:
    """Name and one-line description of each patch, for the changelog."""
    from .patching import series

    summaries = []
    for name in series(patches_dir):
        text = (patches_dir / name).read_text(encoding="utf-8")
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
    """Copy ``source`` to ``destination``: ``*.j2`` files rendered, others copied as they are;
    in a file name with a leading ``package.``, every ``package`` becomes the package's name
    (debhelper's naming: ``package.package-x.service`` is the unit ``<name>-x.service``)."""
    written = []
    for path in _files(source):
        relative = path.relative_to(source)
        if relative.name.startswith("package.") and "name" in context:
            relative = relative.with_name(relative.name.replace("package", context["name"]))
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
