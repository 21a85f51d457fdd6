"""npuctl's command line. Only click is imported up front: each command's module, numpy and
the NPU binding are imported when that command runs, so --help and --version start fast."""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from . import __version__
from .defaults import DEFAULT_MAX_IMAGE_PIXELS
from .errors import ExitCode, NpuctlError
from .families import all_platforms
from .platform import LazyCommand
from .settings import Settings

# name -> (module, attribute, one-line help shown by 'npuctl --help'); each family's own
# commands follow them (Platform.commands).
COMMANDS: dict[str, tuple[str, str, str]] = {
    "doctor": (
        "npuctl.commands.doctor",
        "doctor",
        "Check the whole NPU stack and say how to fix what is wrong.",
    ),
    "provision": (
        "npuctl.commands.provision",
        "provision",
        "Finish the board set-up (needs root).",
    ),
    "driver": (
        "npuctl.commands.driver",
        "driver",
        "Hold or release a build of the NPU driver module (its first-load trial).",
    ),
    "models": ("npuctl.commands.models", "models", "Manage the models npuctl knows by name."),
    "run": ("npuctl.commands.run", "run", "Run a model on the NPU."),
    "bench": (
        "npuctl.commands.bench",
        "bench",
        "Time a model on the NPU (and on the CPU where it can).",
    ),
    "serve": (
        "npuctl.serve.command",
        "serve",
        "Serve the NPU's models over HTTP (DeepStack, KServe v2, OpenAI).",
    ),
    "cdi": ("npuctl.cdi.command", "cdi", "CDI specs: the NPU in containers and on K3s nodes."),
    "k8s": ("npuctl.k8s.command", "k8s", "Kubernetes / K3s manifests for npuctl serve on a fleet."),
    "watch": (
        "npuctl.watch.command",
        "watch",
        "Watch this machine's metrics for anomalies, embedded on the NPU.",
    ),
}


def family_commands() -> dict[str, LazyCommand]:
    return {name: command for p in all_platforms() for name, command in p.commands().items()}


@dataclass(frozen=True)
class Part:
    """Commands that come in a package of their own (the core stays small): the Debian
    package and the PyPI extra that add them."""

    package: str
    extra: str

    @property
    def how(self) -> str:
        return f"apt install {self.package} (or pip install 'npuctl[{self.extra}]')"


PARTS: dict[str, Part] = {
    "serve": Part("npuctl-serve", "serve"),
    "watch": Part("npuctl-watch", "watch"),
}


def part_installed(name: str) -> bool:
    """Whether the part's own modules are there (its dependencies show only on import)."""
    return importlib.util.find_spec(COMMANDS[name][0].rpartition(".")[0]) is not None


class LazyGroup(click.Group):
    """Subcommands imported on use; their help line comes from COMMANDS without importing."""

    def list_commands(self, context: click.Context) -> list[str]:
        return [*COMMANDS, *family_commands()]

    def get_command(self, context: click.Context, name: str) -> click.Command | None:
        if name in (family := family_commands()):
            return family[name].load()
        if name not in COMMANDS:
            return None
        module, attribute, _ = COMMANDS[name]
        try:
            return getattr(importlib.import_module(module), attribute)
        except ModuleNotFoundError as missing:
            if name not in PARTS:
                raise
            part = PARTS[name]
            what = "is not installed" if not part_installed(name) else f"needs {missing.name}"
            raise NpuctlError(f"'npuctl {name}' {what}: {part.how}", ExitCode.USAGE) from None

    def format_commands(self, context: click.Context, formatter: click.HelpFormatter) -> None:
        rows = []
        for name, (_, _, text) in COMMANDS.items():
            if name in PARTS and not part_installed(name):
                text = f"{text} [not installed: apt install {PARTS[name].package}]"
            rows.append((name, text))
        rows += [(name, command.help) for name, command in family_commands().items()]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


def with_platform_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Each platform's global options (its runtime's library, timeouts ...)."""
    for platform in reversed(all_platforms()):
        for option in reversed(platform.global_options):
            command = option(command)
    return command


@click.group(
    cls=LazyGroup,
    context_settings={"help_option_names": ["-h", "--help"]},
    help="Validate, run and benchmark the NPU of an ARM board: "
    + "; ".join(platform.title for platform in all_platforms())
    + ".",
)
@click.version_option(__version__, prog_name="npuctl")
@click.option(
    "--platform",
    type=click.Choice([platform.name for platform in all_platforms()]),
    envvar="NPUCTL_PLATFORM",
    default=None,
    help="The NPU family [default: the one this machine has].",
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
    "--max-image-pixels",
    type=click.IntRange(1, 2**31 - 1),
    envvar="NPUCTL_MAX_IMAGE_PIXELS",
    default=DEFAULT_MAX_IMAGE_PIXELS,
    show_default=True,
    help="Refuse larger images before decoding them.",
)
@with_platform_options
@click.pass_context
def cli(
    context: click.Context,
    platform: str | None,
    models_dir: Path | None,
    max_image_pixels: int,
    **options: object,
) -> None:
    context.obj = Settings(models_dir, max_image_pixels, platform, options)


def main(argv: list[str] | None = None) -> int:
    """Entry point: every failure becomes one line on stderr and a documented exit code."""
    args = sys.argv[1:] if argv is None else argv
    as_json = "--json" in args
    try:
        cli.main(args=args, prog_name="npuctl", standalone_mode=False)
    except NpuctlError as error:
        report_error(str(error), error.code, as_json)
        return int(error.code)
    except (click.exceptions.Abort, KeyboardInterrupt):
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
        report_error(
            f"internal error: {type(error).__name__}: {error} (NPUCTL_DEBUG=1 shows the traceback)",
            ExitCode.INTERNAL,
            as_json,
        )
        return ExitCode.INTERNAL
    return ExitCode.OK


def report_error(message: str, code: int, as_json: bool) -> None:
    """One line on stderr; with --json also a JSON object on stdout (schema npuctl-error/1)."""
    click.echo(f"npuctl: error: {message}", err=True)
    if as_json:
        document = {"schema": "npuctl-error/1", "error": message, "exit_code": int(code)}
        click.echo(json.dumps(document, ensure_ascii=True))
