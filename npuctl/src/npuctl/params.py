"""Command-line parameter types shared by the commands."""

from __future__ import annotations

from pathlib import Path

import click

from .errors import InputError


class Utf8Text(click.ParamType):
    """A text argument that must be valid UTF-8. Python hands undecodable bytes of argv over
    as lone surrogates (surrogateescape); they would reach the tokenizer and the JSON
    output as invalid UTF-8."""

    name = "text"

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> str:
        text = str(value)
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as error:
            byte = text[error.start].encode("utf-8", "surrogateescape")
            raise InputError(
                f"a text is not valid UTF-8 (byte 0x{byte.hex()} at character "
                f"{error.start + 1}): pass UTF-8 text"
            ) from None
        return text


UTF8_TEXT = Utf8Text()


# Every command that reads the system can be pointed at an image of one instead (the tests'
# board images); hidden, because users have no need of it.
root_option = click.option(
    "--root",
    type=click.Path(path_type=Path),
    default=Path("/"),
    hidden=True,
    envvar="NPUCTL_ROOT",
    help="Inspect a system image under this directory.",
)


# The --json flag of every command whose output is a table, or JSON for machines.
JSON_OUTPUT = click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
