"""npuctl cfg check FILE.cfg"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from npuctl import __version__
from npuctl.errors import ExitCode
from npuctl.output import emit_json
from npuctl.params import JSON_OUTPUT

from .cfg_check import Checker


@click.group()
def cfg() -> None:
    """Check CixBuilder configs before compiling a model for the Zhouyi NPU."""


@cfg.command()
@click.argument("config", type=click.Path(path_type=Path))
@JSON_OUTPUT
def check(config: Path, as_json: bool) -> None:
    """Every known trap of CONFIG, with its line and the fix.

    Exit codes: 0 no trap, 10 warnings, 11 failures, 3 not a config."""
    report = Checker(config).run()
    if as_json:
        document = report.as_dict(__version__)
        document["schema"] = "npuctl-cfg-check/1"
        emit_json(document)
    else:
        click.echo(
            report.render(
                {
                    ExitCode.OK: "no trap found",
                    ExitCode.DOCTOR_WARNINGS: "warnings: read them before compiling",
                    ExitCode.DOCTOR_FAILURES: "CixBuilder would fail or build a wrong model",
                }
            )
        )
    if report.exit_code != ExitCode.OK:
        sys.exit(int(report.exit_code))
