"""npuctl run MODEL ...: every platform's run commands under one group, each imported only
when it runs."""

from __future__ import annotations

import click

from ..families import all_platforms
from ..platform import LazyCommand


def _run_commands() -> dict[str, LazyCommand]:
    return {name: command for p in all_platforms() for name, command in p.run_commands().items()}


class PlatformCommands(click.Group):
    def list_commands(self, context: click.Context) -> list[str]:
        return list(_run_commands())

    def get_command(self, context: click.Context, name: str) -> click.Command | None:
        found = _run_commands().get(name)
        return None if found is None else found.load()

    def format_commands(self, context: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(name, found.help) for name, found in _run_commands().items()])


@click.group(cls=PlatformCommands)
def run() -> None:
    """Run a model on the NPU."""
