"""npuctl(1), generated from the command line itself: every command with its full help and
options, and the exit-code table. Run at package build time: python3 -m npuctl.manpage"""

from __future__ import annotations

import inspect
import sys

import click

from . import __version__
from .cli import PARTS, cli
from .errors import EXIT_CODES
from .families import all_platforms


def _roff(text: str) -> str:
    escaped = text.replace("\\", "\\e").replace("-", "\\-")
    return "\n".join(
        ("\\&" + line) if line.startswith((".", "'")) else line for line in escaped.splitlines()
    )


def _paragraphs(text: str | None) -> list[str]:
    paragraphs = [" ".join(p.split()) for p in inspect.cleandoc(text or "").split("\n\n")]
    lines: list[str] = []
    for paragraph in paragraphs:
        if paragraph:
            lines += [".PP", _roff(paragraph)]
    return lines


def _options(command: click.Command, context: click.Context) -> list[str]:
    lines = []
    for parameter in command.get_params(context):
        record = parameter.get_help_record(context)
        if record is None:
            continue
        names, text = record
        lines += [".TP", f"\\fB{_roff(names)}\\fR", _roff(text or "")]
    return lines


def _command(name: str, command: click.Command, parent: click.Context) -> list[str]:
    context = click.Context(command, info_name=name, parent=parent)
    usage = " ".join(command.collect_usage_pieces(context))
    lines = [
        ".SS " + _roff(context.command_path),
        f"\\fB{_roff(context.command_path)}\\fR " + _roff(usage),
        *_paragraphs(command.help),
    ]
    options = _options(command, context)
    if options:
        lines += [".PP", "Options:", ".RS", *options, ".RE"]
    if isinstance(command, click.Group):
        for sub in command.list_commands(context):
            found = command.get_command(context, sub)
            if found is not None:
                lines += _command(sub, found, context)
    return lines


def render() -> str:
    root = click.Context(cli, info_name="npuctl")
    lines = [
        f'.TH NPUCTL 1 "" "npuctl {__version__}" "User Commands"',
        ".SH NAME",
        "npuctl \\- validate, run and benchmark the NPUs of ARM boards",
        ".SH SYNOPSIS",
        "\\fBnpuctl\\fR [\\fIOPTIONS\\fR] \\fICOMMAND\\fR [\\fIARGS\\fR]...",
        ".SH DESCRIPTION",
        *_paragraphs(cli.help),
        ".SH OPTIONS",
        *_options(cli, root),
        ".SH COMMANDS",
    ]
    for name in cli.list_commands(root):
        command = cli.get_command(root, name)
        if command is None:
            continue
        section = _command(name, command, root)
        if name in PARTS:  # after the heading and the synopsis
            section[2:2] = [".PP", _roff(f"Installed by the {PARTS[name].package} package.")]
        lines += section
    lines.append(".SH EXIT STATUS")
    for code, meaning in EXIT_CODES:
        lines += [".TP", f"\\fB{code}\\fR", _roff(meaning)]
    lines.append(".SH ENVIRONMENT")
    for variable, meaning in (
        *_platform_variables(),
        ("NPUCTL_MODELS", "the model directory (as --models-dir)."),
        ("NPUCTL_MAX_IMAGE_PIXELS", "as --max-image-pixels."),
        ("NPUCTL_DEBUG", "show the traceback of an internal error, and library warnings."),
    ):
        lines += [".TP", f"\\fB{variable}\\fR", _roff(meaning)]
    return "\n".join(lines) + "\n"


def _platform_variables() -> list[tuple[str, str]]:
    """The variables the families' own global options read, as their --help says."""
    found = []
    for platform in all_platforms():
        for decorate in platform.global_options:
            probe = click.Command("probe")
            decorate(probe)  # an option decorating a command adds itself to its params
            option = probe.params[0]
            if isinstance(option, click.Option) and isinstance(option.envvar, str):
                found.append((option.envvar, f"as {option.opts[0]}: {option.help}"))
    return found


if __name__ == "__main__":
    sys.stdout.write(render())
