"""npuctl's copy of the driver descriptions: npuctl/src/npuctl/drivers.json, generated from
dkms/*.yaml so that npuctl (installed on its own, without this tree) knows each driver by the
same names the packages are built with. A test and 'make deb' fail when it drifts."""

from __future__ import annotations

import json
from pathlib import Path

from .atomic import write_atomically
from .config import REPO_ROOT, Config, load_package, package_names
from .errors import BuildError, ExitCode

DRIVERS_JSON = REPO_ROOT / "npuctl" / "src" / "npuctl" / "drivers.json"
SCHEMA = "npuctl-drivers/1"


def description(config: Config) -> dict[str, object]:
    """What npuctl needs of one driver."""
    gate = list(config.kernel_config_gate)
    return {
        "package": config.name,
        "module": config.module,
        "version": config.version,
        "platform": config.npuctl_platform,
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
        "board_files": [board_file.installed_path for board_file in config.board_files],
    }


def document() -> str:
    drivers = [description(load_package(name)) for name in package_names()]
    return json.dumps({"schema": SCHEMA, "drivers": drivers}, indent=2) + "\n"


def write(target: Path = DRIVERS_JSON) -> Path:
    write_atomically(target, document())
    return target


def check(target: Path = DRIVERS_JSON) -> None:
    current = target.read_text(encoding="utf-8") if target.is_file() else ""
    if current != document():
        raise BuildError(
            f"{target} does not match dkms/*.yaml: run 'make drivers-data' and commit the result",
            ExitCode.USAGE,
        )
