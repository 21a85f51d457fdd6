"""npuctl doctor"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from .. import __version__
from ..cli import Settings, pass_settings
from ..doctor.bundle import write_bundle
from ..doctor.run import Options, run_doctor
from ..errors import ExitCode
from ..output import emit_json
from ..platforms import by_name
from ..system import Identity, System


@click.command()
@click.option("--quick", is_flag=True, help="Skip running the models.")
@click.option(
    "--json", "as_json", is_flag=True, help="Machine-readable output (schema npuctl-doctor/1)."
)
@click.option(
    "--bundle",
    type=click.Path(path_type=Path),
    default=None,
    help="Also write a support tarball (no private data) to this file.",
)
@click.option(
    "--root",
    type=click.Path(path_type=Path),
    default=Path("/"),
    hidden=True,
    envvar="NPUCTL_ROOT",
    help="Inspect a system image under this directory.",
)
@pass_settings
def doctor(settings: Settings, quick: bool, as_json: bool, bundle: Path | None, root: Path) -> None:
    """Check the whole NPU stack and say how to fix what is wrong.

    Exit codes: 0 all good, 10 warnings, 11 failures, 1 npuctl itself failed."""
    identity = os.environ.get("NPUCTL_IDENTITY")
    system = (
        System(root, Identity.from_text(identity))
        if identity and root != Path("/")
        else System(root)
    )
    options = Options(settings.models_dir, settings.manifest, settings.options, quick=quick)
    if os.environ.get("NPUCTL_DOCTOR_CHILD_TIMEOUT"):  # seconds a child may take
        options.timeout_s = float(os.environ["NPUCTL_DOCTOR_CHILD_TIMEOUT"])
    report = run_doctor(system, options, settings.platform)
    if as_json:
        emit_json(report.as_dict(__version__))
    else:
        click.echo(report.render())
    if bundle is not None:
        platform = report.facts.get("platform")
        checks = by_name(str(platform)).module("doctor") if platform else None
        write_bundle(
            bundle,
            report,
            system,
            __version__,
            checks.MODULE if checks else "",
            checks.kernel_log(system) if checks else [],
        )
        click.echo(f"support bundle: {bundle}", err=True)
    code = report.exit_code
    if code != ExitCode.OK:
        sys.exit(int(code))
