"""The manifests of one NPU family: a DaemonSet of 'npuctl serve' on the nodes npuctl doctor
labelled healthy, its Service, and (with --device-via device-plugin) generic-device-plugin."""

from __future__ import annotations

from dataclasses import dataclass
from importlib.resources import files

import yaml
from jinja2 import Environment, StrictUndefined

from ..defaults import DEFAULT_SERVE_PORT
from ..doctor.nfd import NAMESPACE
from ..models.manifest import load_manifest
from ..platform import Platform

PLUGIN_IMAGE = "squat/generic-device-plugin:latest"


@dataclass(frozen=True)
class Choices:
    image: str
    namespace: str = "npuctl"
    port: int = DEFAULT_SERVE_PORT
    deadline: int = 30
    device_via: str = "cdi"  # or "device-plugin"
    render_gid: int = 107
    api_key_secret: str | None = "npuctl-serve-api-key"  # None: the pods take no key
    zmq_port: int | None = None  # Frigate's remote detector's port; None: not opened
    zmq_from: str | None = None  # the only addresses it takes (a NetworkPolicy); None: any


def render(platform: Platform, choices: Choices) -> str:
    environment = Environment(undefined=StrictUndefined, keep_trailing_newline=True)
    templates = files(__package__) / "templates"
    resource = f"squat.ai/{platform.name}-npu"
    context = {
        "family": platform.name,
        "namespace": choices.namespace,
        "image": choices.image,
        "port": choices.port,
        "deadline": choices.deadline,
        "device_via": choices.device_via,
        "render_gid": choices.render_gid,
        "workers": platform.serve_workers,
        "api_key_secret": choices.api_key_secret,
        "zmq_port": choices.zmq_port,
        "zmq_from": choices.zmq_from,
        # Immich's server sends no key: its routes open where the family computes its models
        "immich": any(entry.immich for entry in load_manifest().models_of(platform.name)),
        "label_namespace": NAMESPACE,
        "labels": {
            "app.kubernetes.io/name": "npuctl-serve",
            f"{NAMESPACE}/npu-family": platform.name,
        },
        "cdi_device": f"{platform.cdi_kind}=0",
        "plugin_resource": resource,
        "plugin_image": PLUGIN_IMAGE,
        "device_paths": platform.device_paths,
        "plugin_device": {
            "name": f"{platform.name}-npu",
            "groups": [{"paths": [{"path": p} for p in platform.device_paths], "count": 1}],
        },
    }
    names = ["serve.yaml.j2"] + (["device-plugin.yaml.j2"] if choices.device_via != "cdi" else [])
    parts = [
        environment.from_string((templates / name).read_text(encoding="utf-8")).render(context)
        for name in names
    ]
    text = "---\n".join(parts)
    list(yaml.safe_load_all(text))  # what it renders must at least be YAML
    return text
