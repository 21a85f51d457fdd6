"""npuctl's copy of the driver descriptions: npuctl/src/npuctl/drivers.json, generated from
dkms/*.yaml so that npuctl (installed on its own, without this tree) knows each driver by the
same names the packages are built with, and the families' extras in npuctl/pyproject.toml
(one per family that needs more than the core from PyPI, named by its platform, and
'families', all of them). A test and 'make deb' fail when either drifts."""

from __future__ import annotations

import json
from pathlib import Path

from .atomic import write_atomically
from .config import REPO_ROOT, Config, load_package, package_names
from .errors import BuildError, ExitCode

DRIVERS_JSON = REPO_ROOT / "npuctl" / "src" / "npuctl" / "drivers.json"
PYPROJECT = REPO_ROOT / "npuctl" / "pyproject.toml"
SCHEMA = "npuctl-drivers/1"
EXTRAS_BEGIN = "# BEGIN the families' extras"
EXTRAS_END = "# END the families' extras"
ALL_FAMILIES = "families"


def description(config: Config) -> dict[str, object]:
    """What npuctl needs of one driver."""
    gate = list(config.kernel_config_gate)
    return {
        "package": config.name,
        "module": config.module,
        "version": config.version,
        "platform": config.npuctl_platform,
        "python_requires": list(config.npuctl_requires),
        "platform_driver": config.platform_driver,
        "device": dict(config.device),
        "acpi_ids": list(config.acpi_ids),
        "compatibles": list(config.compatibles),
        "kernel_min": config.kernel_min,
        # The symbols that must be on, and those that mean the kernel has the driver already.
        "config_required": [symbol for symbol in gate if not symbol.startswith("!")],
        "config_in_tree": [symbol[1:] for symbol in gate if symbol.startswith("!")],
        "in_tree_module": config.kernel_in_tree_module,
        "takes_over": list(config.takes_over),
        "alternative_to": config.alternative_to,
        "board_files": [board_file.installed_path for board_file in config.board_files],
    }


def document() -> str:
    drivers = [description(load_package(name)) for name in package_names()]
    return json.dumps({"schema": SCHEMA, "drivers": drivers}, indent=2) + "\n"


def _toml_list(items: list[str]) -> str:
    return "[" + ", ".join(json.dumps(item) for item in items) + "]"


def extras_block() -> str:
    """The generated lines of pyproject.toml's [project.optional-dependencies]."""
    configs = [load_package(name) for name in package_names()]
    lines = [
        f"{config.npuctl_platform} = {_toml_list(list(config.npuctl_requires))}"
        for config in configs
        if config.npuctl_requires
    ]
    everything = sorted({item for config in configs for item in config.npuctl_requires})
    lines.append(f"{ALL_FAMILIES} = {_toml_list(everything)}")
    return "\n".join([EXTRAS_BEGIN, *lines, EXTRAS_END])


def pyproject(current: str, target: Path = PYPROJECT) -> str:
    """pyproject.toml with its families' extras as dkms/*.yaml declare them."""
    begin, end = current.find(EXTRAS_BEGIN), current.find(EXTRAS_END)
    if begin < 0 or end < begin:
        raise BuildError(
            f"{target} lacks the lines '{EXTRAS_BEGIN}' ... '{EXTRAS_END}' in "
            "[project.optional-dependencies]",
            ExitCode.USAGE,
        )
    return current[:begin] + extras_block() + current[end + len(EXTRAS_END) :]


def write(target: Path = DRIVERS_JSON, project: Path = PYPROJECT) -> Path:
    write_atomically(target, document())
    current = project.read_text(encoding="utf-8")
    updated = pyproject(current, project)
    if updated != current:
        write_atomically(project, updated)
    return target


def check(target: Path = DRIVERS_JSON, project: Path = PYPROJECT) -> None:
    current = target.read_text(encoding="utf-8") if target.is_file() else ""
    stale = []
    if current != document():
        stale.append(str(target))
    project_text = project.read_text(encoding="utf-8")
    if pyproject(project_text, project) != project_text:
        stale.append(f"{project}'s families' extras")
    if stale:
        raise BuildError(
            f"{' and '.join(stale)} do not match dkms/*.yaml: run 'make drivers-data' and "
            "commit the result",
            ExitCode.USAGE,
        )
