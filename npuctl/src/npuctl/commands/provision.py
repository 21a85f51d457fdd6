"""npuctl provision"""

from __future__ import annotations

import os
from pathlib import Path

import click

from ..cli import Settings, pass_settings
from ..doctor.system import System
from ..models.download import fetch
from ..models.store import SYSTEM_DIR, Lock
from ..provision import actions
from ..provision.actions import ProvisionError

DEFAULT_ACTIONS = ("group", "runtime-pm", "models")
ALL_ACTIONS = ("group", "runtime-pm", "models", "umd", "ld-path")


@click.command()
@click.option("--dry-run", is_flag=True, help="Print each action, change nothing.")
@click.option("--undo", is_flag=True, help="Reverse the actions.")
@click.option(
    "--only",
    "only",
    multiple=True,
    type=click.Choice(ALL_ACTIONS),
    help="Run only these actions (repeat).",
)
@click.option(
    "--user", default=None, help="User to add to the device group [default: the user who ran sudo]."
)
@click.option("--group", default="render", show_default=True)
@click.option(
    "--umd-deb",
    type=click.Path(path_type=Path, exists=True, dir_okay=False),
    default=None,
    help="CIX's cix-noe-umd .deb to install without its pip postinst.",
)
@click.option(
    "--ld-path",
    is_flag=True,
    help="Also add libnoe's folder to the linker path (npuctl itself loads it by path).",
)
@click.option(
    "--root", type=click.Path(path_type=Path), default=Path("/"), hidden=True, envvar="NPUCTL_ROOT"
)
@pass_settings
def provision(
    settings: Settings,
    dry_run: bool,
    undo: bool,
    only: tuple[str, ...],
    user: str | None,
    group: str,
    umd_deb: Path | None,
    ld_path: bool,
    root: Path,
) -> None:
    """Finish the board set-up: device group, NPU power, models, libnoe (idempotent)."""
    system = System(root)
    if root == Path("/") and os.geteuid() != 0 and not dry_run:
        raise ProvisionError("provision changes the system: run it with sudo (or --dry-run)")
    names = list(only) or [
        *DEFAULT_ACTIONS,
        *(["umd"] if umd_deb else []),
        *(["ld-path"] if ld_path else []),
    ]
    warn_without_npu(system)
    user = user or os.environ.get("SUDO_USER") or os.environ.get("USER") or "root"
    models_dir = (
        settings.npu.models_dir if "NPUCTL_MODELS" in os.environ else (system.path(str(SYSTEM_DIR)))
    )

    def fetch_all() -> None:
        lock = Lock.load(models_dir)
        for entry in settings.manifest.with_needs([m.name for m in settings.manifest.models]):
            fetch(entry, models_dir, lock, progress=True)

    chosen = []
    for name in names:
        if name == "group":
            chosen.append(actions.group_action(system, user, group))
        elif name == "runtime-pm":
            chosen.append(actions.runtime_pm_action(system))
        elif name == "models":
            chosen.append(actions.models_action(system, models_dir, fetch_all))
        elif name == "ld-path":
            chosen.append(actions.ld_path_action(system))
        elif name == "umd":
            if umd_deb is None:
                raise ProvisionError("--only umd needs --umd-deb FILE")
            chosen.append(actions.umd_action(system, umd_deb))
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


def warn_without_npu(system: System) -> None:
    """Set-up for an NPU this machine does not have is allowed (an image prepared elsewhere),
    but never silently."""
    from ..doctor.findings import Report
    from ..doctor.host import check_platform

    report = Report()
    if not check_platform(system, report):
        click.echo(
            f"npuctl: warning: {report.findings[-1].summary}; these changes are of no use "
            "on this machine",
            err=True,
        )
