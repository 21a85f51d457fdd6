"""npuctl provision: the actions of this machine's NPU family (or --platform's), each
idempotent, with --dry-run and --undo."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from ..drivers import for_platform
from ..families import all_platforms, by_name, detect
from ..models.download import fetch
from ..models.store import SYSTEM_DIR, Lock
from ..params import root_option
from ..provision.actions import COMMAND_TIMEOUT_SECONDS, ProvisionError, Request
from ..provision.blacklist import lift_blacklist_action
from ..provision.site_files import nfd_action
from ..settings import Settings, pass_settings
from ..system import System

# Actions every family has, never run unless asked (--only).
SHARED_ACTIONS = ("nfd", "lift-blacklist")


def _action_names() -> list[str]:
    names: list[str] = []
    for platform in all_platforms():
        names += [n for n in platform.provision_actions if n not in names]
    return names + list(SHARED_ACTIONS)


def with_provision_options(command: Callable[..., Any]) -> Callable[..., Any]:
    for platform in reversed(all_platforms()):
        for option in reversed(platform.provision_options):
            command = option(command)
    return command


@click.command(
    help="Finish the board set-up for its NPU family (idempotent). Each family's actions: "
    + "; ".join(
        f"{platform.title}: {', '.join(platform.provision_actions)}" for platform in all_platforms()
    )
    + ". What every board of a family needs (udev rules, NPU power, blacklists) comes with "
    "its driver package."
)
@click.option("--dry-run", is_flag=True, help="Print each action, change nothing.")
@click.option("--undo", is_flag=True, help="Reverse the actions.")
@click.option(
    "--only",
    "only",
    multiple=True,
    type=click.Choice(_action_names()),
    help="Run only these actions (repeat).",
)
@click.option(
    "--user", default=None, help="User to add to the device group [default: the user who ran sudo]."
)
@click.option("--group", default="render", show_default=True)
@root_option
@with_provision_options
@pass_settings
def provision(
    settings: Settings,
    dry_run: bool,
    undo: bool,
    only: tuple[str, ...],
    user: str | None,
    group: str,
    root: Path,
    **options: object,
) -> None:
    system = System(root, timeout=COMMAND_TIMEOUT_SECONDS)
    platform = _platform(system, settings.platform)
    known = (*platform.provision_actions, *SHARED_ACTIONS)
    unknown = [name for name in only if name not in known]
    if unknown:
        raise ProvisionError(
            f"{', '.join(unknown)}: not an action of {platform.name}; its actions: "
            f"{', '.join(known)}"
        )
    if root == Path("/") and os.geteuid() != 0 and not dry_run:
        raise ProvisionError("provision changes the system: run it with sudo (or --dry-run)")
    user = user or os.environ.get("SUDO_USER") or os.environ.get("USER") or "root"
    models_dir = (
        settings.models_dir if "NPUCTL_MODELS" in os.environ else system.path(str(SYSTEM_DIR))
    )

    def fetch_models() -> None:
        lock = Lock.load(models_dir)
        names = [m.name for m in settings.manifest.models_of(platform.name)]
        for entry in settings.manifest.with_needs(names):
            fetch(entry, models_dir, lock, progress=True)

    request = Request(system, user, group, models_dir, fetch_models, options)
    names = list(only) or platform.default_provision(request)
    shared = {
        "nfd": lambda: nfd_action(system),
        "lift-blacklist": lambda: lift_blacklist_action(system, for_platform(platform.name).module),
    }
    chosen = [
        shared[name]() if name in shared else platform.provision(name, request) for name in names
    ]
    for action in reversed(chosen) if undo else chosen:
        done = action.is_done()
        if undo:
            state, step = (
                ("not done", None)
                if not done
                else ("would undo" if dry_run else "undone", action.undo)
            )
        else:
            state, step = (
                ("already", None) if done else ("would do" if dry_run else "done", action.apply)
            )
        if step is not None and not dry_run:
            step()
        click.echo(f"[{state}] {action.name}: {action.description}")
        if dry_run and step is not None and action.commands:
            for line in action.commands:
                click.echo(f"    {line}")


def _platform(system: System, forced: str | None):  # noqa: ANN202
    """The family to set up. Set-up for an NPU this machine does not have is allowed (an image
    prepared elsewhere, with --platform), but never silently."""
    found = detect(system)
    if forced:
        platform = by_name(forced)
        if found is None or found[0] is not platform:
            click.echo(
                f"npuctl: warning: no {platform.title} on this machine ({platform.absent}); "
                "these changes are of no use on this machine",
                err=True,
            )
        return platform
    if found is None:
        names = ", ".join(p.name for p in all_platforms())
        raise ProvisionError(
            "no supported NPU on this machine: pass --platform "
            f"({names}) to prepare an image for one"
        )
    return found[0]
