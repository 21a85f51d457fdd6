"""npuctl k8s render"""

from __future__ import annotations

from pathlib import Path

import click

from .. import __version__
from ..defaults import DEFAULT_SERVE_PORT, DEFAULT_ZMQ_PORT
from ..families import all_platforms, by_name
from ..files import write_text_atomically
from ..system import System
from .render import Choices, render


def _render_gid() -> int:
    """This machine's render group, the usual one on the nodes of a uniform fleet."""
    for line in (System().read("/etc/group") or "").splitlines():
        fields = line.split(":")
        if fields[0] == "render" and len(fields) > 2 and fields[2].isdigit():
            return int(fields[2])
    return Choices.render_gid


@click.group()
def k8s() -> None:
    """Kubernetes / K3s manifests for npuctl serve on a fleet."""


@k8s.command(name="render")
@click.option(
    "--family",
    type=click.Choice(SERVED := [p.name for p in all_platforms() if p.serves]),
    default=SERVED[0],
    show_default=True,
)
@click.option(
    "--image",
    default=None,
    help="The image 'make image' printed [default: localhost/<the family's image>:VERSION].",
)
@click.option("--namespace", default="npuctl", show_default=True)
@click.option(
    "--port", type=click.IntRange(1, 65535), default=DEFAULT_SERVE_PORT, show_default=True
)
@click.option(
    "--device-via",
    type=click.Choice(["cdi", "device-plugin"]),
    default="cdi",
    show_default=True,
    help="cdi: the node's CDI spec (containerd 2, CRI-O); device-plugin: generic-device-plugin.",
)
@click.option(
    "--render-gid",
    type=click.IntRange(0),
    default=None,
    help="[default: this machine's render group]",
)
@click.option(
    "--api-key-secret",
    default="npuctl-serve-api-key",
    show_default=True,
    help="The Secret whose key 'key' holds the API key the pods require (none: no key).",
)
@click.option(
    "--zmq-port",
    type=click.IntRange(1, 65535),
    default=None,
    help=f"Also serve as Frigate's remote detector on this port ({DEFAULT_ZMQ_PORT} is the "
    "usual one) [default: not opened].",
)
@click.option(
    "--zmq-from",
    default=None,
    metavar="CIDR",
    help="Let only these addresses reach that port (a NetworkPolicy, which K3s enforces).",
)
@click.option("--output", type=click.Path(path_type=Path, dir_okay=False), default=None)
def render_command(
    family: str,
    image: str | None,
    namespace: str,
    port: int,
    device_via: str,
    render_gid: int | None,
    api_key_secret: str,
    zmq_port: int | None,
    zmq_from: str | None,
    output: Path | None,
) -> None:
    """Print (or write to --output) the manifests: a DaemonSet of npuctl serve on the nodes
    labelled npuctl.io/npu-healthy=true, its Service, and the device plugin if chosen."""
    platform = by_name(family)
    choices = Choices(
        image or f"localhost/{platform.container_image}:{__version__}",
        namespace,
        port,
        device_via=device_via,
        render_gid=render_gid or _render_gid(),
        api_key_secret=None if api_key_secret == "none" else api_key_secret,
        zmq_port=zmq_port,
        zmq_from=zmq_from,
    )
    text = render(platform, choices)
    if zmq_port and not zmq_from:
        click.echo(
            f"npuctl k8s render: Frigate's detector port {zmq_port} takes frames from every "
            "address that reaches the Service (Frigate's client sends no credentials): give "
            "--zmq-from CIDR for a NetworkPolicy",
            err=True,
        )
    if output is None:
        click.echo(text, nl=False)
    else:
        write_text_atomically(output, text)
