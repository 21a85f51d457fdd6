"""npuctl cdi generate | list"""

from __future__ import annotations

from pathlib import Path

import click

from ..errors import ExitCode, NpuctlError
from ..families import absent_reasons, chosen
from ..output import emit_json, table
from ..params import JSON_OUTPUT, root_option
from ..settings import Settings, pass_settings
from ..system import System
from . import spec


def edits_for(settings: Settings, system: System) -> spec.NpuEdits:
    platform = chosen(system, settings.platform)
    if platform is None or (platform.locate(system) is None and not settings.platform):
        raise NpuctlError(
            f"no NPU on this machine ({absent_reasons()}): nothing to describe; no spec written",
            ExitCode.DOCTOR_FAILURES,
        )
    edits = platform.cdi_edits(system, settings.options)
    if edits is None:
        raise NpuctlError(f"npuctl cannot describe the {platform.title} for CDI", ExitCode.USAGE)
    return edits


@click.group()
def cdi() -> None:
    """CDI specs: the NPU in containers (podman --device, containerd, CRI-O, Docker)."""


@cdi.command()
@click.option(
    "--spec-dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=spec.SPEC_DIRS[0],
    show_default=True,
)
@click.option(
    "--force", is_flag=True, help="Replace a spec of the same vendor npuctl did not write."
)
@click.option("--stdout", "to_stdout", is_flag=True, help="Print the spec instead of writing it.")
@root_option
@pass_settings
def generate(settings: Settings, spec_dir: Path, force: bool, to_stdout: bool, root: Path) -> None:
    """Write SPEC_DIR/<vendor>.yaml for this machine's NPU: devices <vendor>/npu=0 .. and =all."""
    edits = edits_for(settings, System(root))
    if to_stdout:
        click.echo(spec.render(edits), nl=False)
        return
    target = spec.write(spec_dir, edits, force)
    names = ", ".join(f"{edits.kind}={n}" for n in [*range(len(edits.device_nodes)), "all"])
    click.echo(f"wrote {target}: {names}")
    click.echo(f"  podman run --device {edits.kind}=0 ...")


@cdi.command(name="list")
@click.option(
    "--spec-dir",
    "spec_dirs",
    type=click.Path(path_type=Path, file_okay=False),
    multiple=True,
    help="[default: /etc/cdi and /var/run/cdi]",
)
@JSON_OUTPUT
def list_command(spec_dirs: tuple[Path, ...], as_json: bool) -> None:
    """The CDI device names the specs on this machine define."""
    found = spec.list_devices(spec_dirs or spec.SPEC_DIRS)
    if as_json:
        emit_json({"schema": "npuctl-cdi/1", "devices": found})
        return
    if not found:
        click.echo("no CDI specs (sudo npuctl cdi generate)")
        return
    click.echo(
        table(
            ["device", "spec", "by npuctl"],
            [[d["device"], d["spec"], d.get("ours", d.get("problem", ""))] for d in found],
        )
    )
