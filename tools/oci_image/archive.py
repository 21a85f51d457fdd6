"""An image archive as `podman load`, `docker load` and `ctr import` read it: an OCI image
layout (oci-layout, index.json, blobs/) in a tar, written to a temporary file and renamed.

The manifest and configuration are Docker's schema 2, as `docker save` writes them inside its
OCI layout: that configuration carries HEALTHCHECK, which the OCI one has no field for and
podman reads only from Docker's; registries, containerd and CRI-O take both alike."""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import json
import os
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from .layer import Layer

MANIFEST_TYPE = "application/vnd.docker.distribution.manifest.v2+json"
CONFIG_TYPE = "application/vnd.docker.container.image.v1+json"
LAYER_TYPE = "application/vnd.docker.image.rootfs.diff.tar.gzip"
INDEX_TYPE = "application/vnd.oci.image.index.v1+json"
NANOSECONDS = 1_000_000_000


@dataclass(frozen=True)
class Healthcheck:
    command: list[str]
    interval_s: int = 30
    timeout_s: int = 5
    start_period_s: int = 60
    retries: int = 3


@dataclass(frozen=True)
class ImageConfig:
    reference: str  # the name it loads under, e.g. localhost/npuctl:0.2.0
    architecture: str  # Debian's and Go's name alike for arm64 and amd64
    user: str
    entrypoint: list[str]
    cmd: list[str]
    env: list[str]
    ports: list[int]
    labels: dict[str, str]
    stop_signal: str
    healthcheck: Healthcheck
    epoch: int
    history: str
    volumes: list[str] = field(default_factory=list)

    @property
    def created(self) -> str:
        moment = dt.datetime.fromtimestamp(self.epoch, dt.UTC)
        return moment.strftime("%Y-%m-%dT%H:%M:%SZ")

    @property
    def platform(self) -> dict[str, str]:
        platform = {"architecture": self.architecture, "os": "linux"}
        if self.architecture == "arm64":
            platform["variant"] = "v8"
        return platform


def _json(document: object) -> bytes:
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def configuration(image: ImageConfig, layer: Layer) -> dict:
    check = image.healthcheck
    return {
        **image.platform,
        "created": image.created,
        "config": {
            "User": image.user,
            "Env": image.env,
            "Entrypoint": image.entrypoint,
            "Cmd": image.cmd,
            "WorkingDir": "/",
            "ExposedPorts": {f"{port}/tcp": {} for port in image.ports},
            "Volumes": {path: {} for path in image.volumes},
            "Labels": image.labels,
            "StopSignal": image.stop_signal,
            "Healthcheck": {
                "Test": ["CMD", *check.command],
                "Interval": check.interval_s * NANOSECONDS,
                "Timeout": check.timeout_s * NANOSECONDS,
                "StartPeriod": check.start_period_s * NANOSECONDS,
                "Retries": check.retries,
            },
        },
        "rootfs": {"type": "layers", "diff_ids": [layer.diff_id]},
        "history": [{"created": image.created, "created_by": image.history}],
    }


@dataclass(frozen=True)
class Written:
    path: Path
    manifest_digest: str
    config_digest: str
    layer: Layer


def _add(archive: tarfile.TarFile, name: str, data: bytes, epoch: int) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = len(data), epoch, 0o644
    archive.addfile(info, io.BytesIO(data))


def _add_folder(archive: tarfile.TarFile, name: str, epoch: int) -> None:
    info = tarfile.TarInfo(name)
    info.type, info.mtime, info.mode = tarfile.DIRTYPE, epoch, 0o755
    archive.addfile(info)


def write_archive(image: ImageConfig, layer: Layer, target: Path) -> Written:
    """The image as an OCI layout tar at ``target``; nothing at ``target`` unless complete."""
    config = _json(configuration(image, layer))
    manifest = _json(
        {
            "schemaVersion": 2,
            "mediaType": MANIFEST_TYPE,
            "config": {"mediaType": CONFIG_TYPE, "size": len(config), "digest": _digest(config)},
            "layers": [{"mediaType": LAYER_TYPE, "size": layer.size, "digest": layer.digest}],
        }
    )
    tag = image.reference.rsplit(":", 1)[1]
    index = _json(
        {
            "schemaVersion": 2,
            "mediaType": INDEX_TYPE,
            "manifests": [
                {
                    "mediaType": MANIFEST_TYPE,
                    "size": len(manifest),
                    "digest": _digest(manifest),
                    "platform": image.platform,
                    "annotations": {
                        # containerd (ctr import) names the image from the first, podman
                        # and skopeo from the second; both as Docker's own save writes them.
                        "io.containerd.image.name": image.reference,
                        "org.opencontainers.image.ref.name": tag,
                    },
                }
            ],
        }
    )
    # docker load before Docker 25 reads only this file.
    legacy = _json(
        [
            {
                "Config": f"blobs/sha256/{_digest(config).split(':')[1]}",
                "RepoTags": [image.reference],
                "Layers": [f"blobs/sha256/{layer.digest.split(':')[1]}"],
            }
        ]
    )
    target.parent.mkdir(parents=True, exist_ok=True)
    descriptor, name = tempfile.mkstemp(prefix=f".{target.name}-", dir=target.parent)
    temporary = Path(name)
    try:
        with (
            os.fdopen(descriptor, "wb") as stream,
            tarfile.open(fileobj=stream, mode="w", format=tarfile.PAX_FORMAT) as archive,
        ):
            epoch = image.epoch
            _add(archive, "oci-layout", _json({"imageLayoutVersion": "1.0.0"}), epoch)
            _add(archive, "index.json", index, epoch)
            _add(archive, "manifest.json", legacy, epoch)
            for folder in ("blobs", "blobs/sha256"):
                _add_folder(archive, folder, epoch)
            blobs = {_digest(config): config, _digest(manifest): manifest}
            for digest, data in sorted(blobs.items()):
                _add(archive, f"blobs/sha256/{digest.split(':')[1]}", data, epoch)
            info = tarfile.TarInfo(f"blobs/sha256/{layer.digest.split(':')[1]}")
            info.size, info.mtime, info.mode = layer.size, epoch, 0o644
            with layer.path.open("rb") as content:
                archive.addfile(info, content)
        temporary.chmod(0o644)
        temporary.replace(target)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return Written(target, _digest(manifest), _digest(config), layer)
