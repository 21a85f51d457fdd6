"""npuctl doctor"""

from __future__ import annotations

import os
import sys
from datetime import timedelta
from pathlib import Path

import click

from .. import __version__
from ..doctor.bundle import write_bundle
from ..doctor.dkms_driver import DriverChecks
from ..doctor.nfd import problem_detector, write_features
from ..doctor.options import Options
from ..doctor.run import run_doctor
from ..drivers import for_platform
from ..errors import ExitCode, InputError
from ..output import emit_json
from ..params import root_option
from ..settings import Settings, pass_settings
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
    "--nfd",
    "nfd_file",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Also write Node Feature Discovery labels to this file (features.d/npuctl).",
)
@click.option(
    "--nfd-expiry",
    type=click.IntRange(1, 10_080),
    default=15,
    show_default=True,
    help="Minutes until NFD drops the labels unless the doctor writes them again.",
)
@click.option(
    "--npd",
    is_flag=True,
    help="node-problem-detector plugin: one line, exit 0 ok, 1 problem, 2 unknown.",
)
@root_option
@pass_settings
def doctor(
    settings: Settings,
    quick: bool,
    as_json: bool,
    bundle: Path | None,
    nfd_file: Path | None,
    nfd_expiry: int,
    npd: bool,
    root: Path,
) -> None:
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
    if nfd_file is not None:
        try:
            write_features(nfd_file, report, timedelta(minutes=nfd_expiry))
        except OSError as error:
            raise InputError(f"cannot write {nfd_file}: {error.strerror or error}") from None
    if npd:
        status, line = problem_detector(report)
        click.echo(line)
        sys.exit(status)
    if as_json:
        emit_json(report.as_dict(__version__))
    else:
        click.echo(report.render())
    if bundle is not None:
        platform = report.facts.get("platform")
        driver = for_platform(str(platform)) if platform else None
        checks = DriverChecks(system, driver, report) if driver else None
        write_bundle(
            bundle,
            report,
            system,
            __version__,
            driver.module if driver else "",
            checks.kernel_log() if checks else [],
            checks.trial_files() if checks else {},
        )
        click.echo(f"support bundle: {bundle}", err=True)
    code = report.exit_code
    if code != ExitCode.OK:
        sys.exit(int(code))
