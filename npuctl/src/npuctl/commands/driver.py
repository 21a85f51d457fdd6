"""npuctl driver: hold or release a build of an NPU driver module, and list its trials.

Each driver package loads every build of its module (kernel release x module version) first
as a trial, through its guard (npuctl.trials); a build whose trial an earlier boot never
finished is held. These commands ask the installed package's guard to hold the running
kernel's build (a driver that loads but breaks something else) or to release one for a new
trial, and show the records."""

from __future__ import annotations

import os
from pathlib import Path

import click

from .. import trials
from ..drivers import Driver, all_drivers
from ..errors import ExitCode, NpuctlError
from ..output import emit_json
from ..params import JSON_OUTPUT, UTF8_TEXT, root_option
from ..system import System


def _installed_guard(system: System, module: str) -> tuple[Driver, str]:
    packages = [driver for driver in all_drivers() if driver.module == module]
    if not packages:
        known = ", ".join(sorted({driver.module for driver in all_drivers()}))
        raise NpuctlError(
            f"no driver package builds a module {module!r} (known: {known})", ExitCode.USAGE
        )
    for driver in packages:
        guard = trials.guard_path(driver)
        if system.which(guard):
            return driver, guard
    names = " or ".join(driver.package for driver in packages)
    first = next((d.package for d in packages if not d.alternative_to), packages[0].package)
    raise NpuctlError(
        f"{module}: no trial guard is installed (it comes with {names}): sudo apt install {first}",
        ExitCode.USAGE,
    )


def _run_guard(system: System, *argv: str) -> None:
    if system.is_real and system.identity.uid != 0:
        raise NpuctlError(
            f"npuctl driver {argv[1]} needs root: sudo npuctl driver {argv[1]} ...", ExitCode.USAGE
        )
    # On an image, the guard keeps its records under the image and runs the image's
    # programs (modinfo) first.
    extra = (
        {}
        if system.is_real
        else {
            "MODULE_TRIAL_ROOT": str(system.root),
            "PATH": os.pathsep.join(
                [str(system.path(d)) for d in ("/usr/sbin", "/usr/bin")] + [os.environ["PATH"]]
            ),
        }
    )
    result = system.run(*argv, env=extra)
    if result is None:
        raise NpuctlError(f"{argv[0]} is not installed", ExitCode.USAGE)
    for line in (result.stdout + result.stderr).splitlines():
        click.echo(line)
    if not result.ok:
        raise NpuctlError(f"{argv[0]} {argv[1]} failed (exit {result.returncode})", ExitCode.INPUT)


@click.group()
def driver() -> None:
    """Hold or release a build of the NPU driver module (its first-load trial)."""


@driver.command()
@click.argument("module")
@click.option(
    "--reason", type=UTF8_TEXT, default="", help="Why, for the doctor and the kernel log."
)
@root_option
def hold(module: str, reason: str, root: Path) -> None:
    """Hold the running kernel's build of MODULE: no boot or modprobe loads it until it is
    released (a driver that loads but breaks something else)."""
    system = System(root)
    _, guard = _installed_guard(system, module)
    _run_guard(system, guard, "hold", *([reason] if reason else []))


@driver.command()
@click.argument("module")
@click.option(
    "--kernel", default=None, help="The kernel release whose build to release (default: running)."
)
@root_option
def release(module: str, kernel: str | None, root: Path) -> None:
    """Release a held build of MODULE: its next load (modprobe, or the next boot) is one new
    trial."""
    system = System(root)
    _, guard = _installed_guard(system, module)
    _run_guard(system, guard, "release", *([kernel] if kernel else []))


@driver.command("trials")
@click.argument("module")
@JSON_OUTPUT
@root_option
def trials_of(module: str, as_json: bool, root: Path) -> None:
    """The trial records of MODULE's builds: held, passed, survived or under way."""
    system = System(root)
    driver_, _ = _installed_guard(system, module)
    found = trials.records(system, driver_)
    if as_json:
        emit_json(
            {
                "module": module,
                "package": driver_.package,
                "trials": [record.as_dict() for record in found],
            }
        )
        return
    if not found:
        click.echo(f"{module}: no build has been loaded through its trial yet")
    for record in found:
        since = record.when("held") or record.when("passed") or record.when("ended")
        since = since or record.when("started")
        note = f" ({record.fields['note']})" if record.by_hand else ""
        click.echo(f"{record.kernel}  {record.version}  {record.state}{note}  {since}")
