"""npuctl's command line."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import click

from . import __version__
from .errors import ExitCode, InputError, NpuctlError
from .inference import DEFAULT_TIMEOUT_MS, Npu
from .models.manifest import Entry, Manifest, load_manifest
from .models.store import default_models_dir
from .noe.abi import DEFAULT_LIBRARY


@dataclass
class Settings:
    npu: Npu
    manifest: Manifest


pass_settings = click.make_pass_decorator(Settings)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="npuctl")
@click.option(
    "--library",
    type=click.Path(path_type=Path),
    envvar="NPUCTL_LIBNOE",
    default=DEFAULT_LIBRARY,
    show_default=True,
    help="libnoe.so to use.",
)
@click.option(
    "--models-dir",
    type=click.Path(path_type=Path),
    envvar="NPUCTL_MODELS",
    default=None,
    help="Model directory [default: /var/lib/npuctl/models if it "
    "exists, else ~/.local/share/npuctl/models].",
)
@click.option(
    "--timeout-ms",
    type=click.IntRange(1),
    default=DEFAULT_TIMEOUT_MS,
    show_default=True,
    help="Timeout of one inference.",
)
@click.pass_context
def cli(context: click.Context, library: Path, models_dir: Path | None, timeout_ms: int) -> None:
    """Validate, run and benchmark the Zhouyi NPU of the Orange Pi 6 Plus."""
    context.obj = Settings(
        Npu(library, models_dir or default_models_dir(), timeout_ms), load_manifest()
    )


# Subcommand groups are registered here; each lives in its own module.
def _register() -> None:
    from .commands import bench, doctor, models, provision, run

    cli.add_command(doctor.doctor)
    cli.add_command(provision.provision)
    cli.add_command(models.models)
    cli.add_command(run.run)
    cli.add_command(bench.bench)


_register()


def main(argv: list[str] | None = None) -> int:
    """Entry point: every failure becomes one line on stderr and a documented exit code."""
    try:
        cli.main(args=argv, prog_name="npuctl", standalone_mode=False)
    except NpuctlError as error:
        click.echo(f"npuctl: error: {error}", err=True)
        return int(error.code)
    except click.exceptions.Abort:
        click.echo("npuctl: interrupted", err=True)
        return ExitCode.INTERRUPTED
    except KeyboardInterrupt:
        click.echo("npuctl: interrupted", err=True)
        return ExitCode.INTERRUPTED
    except click.ClickException as error:
        error.show()
        return ExitCode.USAGE if error.exit_code == 2 else error.exit_code
    except click.exceptions.Exit as done:
        return done.exit_code
    except Exception as error:  # a bug: say so in one line, details on request
        if os.environ.get("NPUCTL_DEBUG"):
            raise
        click.echo(
            f"npuctl: internal error: {type(error).__name__}: {error} "
            "(NPUCTL_DEBUG=1 shows the traceback)",
            err=True,
        )
        return ExitCode.INTERNAL
    return ExitCode.OK


def entry_or_path(settings: Settings, name: str, explicit: Path | None) -> tuple[Entry, Path, bool]:
    entry = settings.manifest.get(name)
    path, trusted = settings.npu.resolve(entry, explicit)
    return entry, path, trusted


def require_text(texts: tuple[str, ...]) -> None:
    for text in texts:
        if not text.strip():
            raise InputError("a text is empty: give at least one word")
