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
from ..doctor.system import Identity, System
from ..errors import ExitCode
from ..output import emit_json


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
    options = Options(
        settings.npu.library_path,
        settings.npu.models_dir,
        settings.manifest,
        quick=quick,
        timeout_ms=settings.npu.timeout_ms,
    )
    if os.environ.get("NPUCTL_DOCTOR_CHILD_TIMEOUT"):  # seconds a libnoe child may take
        options.timeout_s = float(os.environ["NPUCTL_DOCTOR_CHILD_TIMEOUT"])
    report = run_doctor(system, options)
    if as_json:
        emit_json(report.as_dict(__version__))
    else:
        click.echo(report.render())
    if bundle is not None:
        write_bundle(bundle, report, system, __version__)
        click.echo(f"support bundle: {bundle}", err=True)
    code = report.exit_code
    if code != ExitCode.OK:
        sys.exit(int(code))
