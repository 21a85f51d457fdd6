"""One image for one architecture: root file system, layer, archive and SBOM in dist/images,
each written whole or not at all."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from npuctl.defaults import DEFAULT_SERVE_PORT, DEFAULT_ZMQ_PORT
from npuctl.models.store import SYSTEM_DIR
from pipeline.atomic import write_atomically
from pipeline.config import REPO_ROOT, load_package, package_names
from pipeline.npuctl_package import npuctl_version
from pipeline.tools import run

from . import rootfs, sbom, workspace
from .archive import Healthcheck, ImageConfig, Written, write_archive
from .definition import Definition
from .errors import ExitCode, ImageError
from .layer import write_layer

NOBODY = "65534:65534"  # Debian's nobody/nogroup; the K3s manifests run the pods as it too
MODELS = str(SYSTEM_DIR)  # where npuctl looks for models on a board, too
REVISION_LABEL = "org.opencontainers.image.revision"
ENVIRONMENT = [
    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "LANG=C.UTF-8",
    f"NPUCTL_MODELS={MODELS}",
    # The root file system is read-only: nothing tries to write byte code next to the sources.
    "PYTHONDONTWRITEBYTECODE=1",
    "PYTHONUNBUFFERED=1",
]


@dataclass(frozen=True)
class Built:
    reference: str
    architecture: str
    archive: Written
    sbom: Path
    revision: str

    def summary(self) -> dict[str, object]:
        return {
            "image": self.reference,
            "architecture": self.architecture,
            "revision": self.revision,
            "archive": str(self.archive.path),
            "sbom": str(self.sbom),
            "manifest_digest": self.archive.manifest_digest,
            "config_digest": self.archive.config_digest,
            "layer_digest": self.archive.layer.digest,
            "layer_diff_id": self.archive.layer.diff_id,
            "compressed_bytes": self.archive.layer.size,
            "uncompressed_bytes": self.archive.layer.tar_size,
        }


def source_epoch() -> int:
    """SOURCE_DATE_EPOCH, else the commit's time: two builds of one commit agree."""
    if value := os.environ.get("SOURCE_DATE_EPOCH"):
        if not value.isdigit():
            raise ImageError(f"SOURCE_DATE_EPOCH={value!r} is not a number", ExitCode.USAGE)
        return int(value)
    result = run(
        ["git", "-C", REPO_ROOT, "log", "-1", "--format=%ct"],
        check=False,
        failure="git log",
        code=ExitCode.USAGE,
    )
    if result.returncode != 0 or not result.stdout.strip().isdigit():
        raise ImageError(
            "no SOURCE_DATE_EPOCH and no git commit to take it from: set SOURCE_DATE_EPOCH",
            ExitCode.USAGE,
        )
    return int(result.stdout.strip())


def revision() -> str:
    result = run(["git", "-C", REPO_ROOT, "rev-parse", "HEAD"], check=False, failure="git")
    return result.stdout.strip() if result.returncode == 0 else "unknown"


def image_config(
    definition: Definition, architecture: str, name: str, version: str, epoch: int
) -> ImageConfig:
    project = load_package(package_names()[0])  # the project's homepage is every package's
    labels = {
        "org.opencontainers.image.title": definition.title,
        "org.opencontainers.image.description": definition.description,
        "org.opencontainers.image.version": version,
        REVISION_LABEL: revision(),
        "org.opencontainers.image.source": project.project_homepage,
        "org.opencontainers.image.url": project.project_homepage,
        "org.opencontainers.image.licenses": "GPL-2.0-only",
        "org.opencontainers.image.base.name": f"debian:{definition.suite}",
        "io.npuctl.families": ",".join(definition.families),
    }
    return ImageConfig(
        reference=name,
        architecture=architecture,
        user=NOBODY,
        entrypoint=["npuctl"],
        cmd=["serve", "--host", "0.0.0.0", "--port", str(DEFAULT_SERVE_PORT), "--no-unix-socket"],
        env=ENVIRONMENT,
        # Frigate's remote detector answers there once NPUCTL_SERVE_ZMQ=tcp://*:5555 asks.
        ports=[DEFAULT_SERVE_PORT, DEFAULT_ZMQ_PORT],
        labels=labels,
        # npuctl serve finishes the requests in flight on SIGTERM (--deadline).
        stop_signal="SIGTERM",
        healthcheck=Healthcheck(["python3", "-m", "npuctl.serve.healthcheck"]),
        epoch=epoch,
        history=f"make image: mmdebstrap {definition.suite} {definition.name} {version}",
        volumes=[MODELS],
    )


def preflight(wanted: list[tuple[Definition, str]], dist: Path) -> None:
    """Every precondition of every image asked for, before anything is built: a missing one
    costs one line and leaves no image."""
    version = npuctl_version()
    source_epoch()
    for definition, architecture in wanted:
        rootfs.local_debs(definition, dist, version)
        rootfs.user_space_debs(definition, architecture)
        rootfs.check_emulation(architecture)
    suites = {s for d, a in wanted for s in d.suites_for(a)}
    rootfs.check_archive(tuple(sorted(suites)))
    if wanted:
        rootfs.tool("mmdebstrap", "mmdebstrap")


def build(
    definition: Definition,
    architecture: str,
    dist: Path,
    work: Path,
) -> Built:
    """Build one image; ``preflight`` has passed for it."""
    version = npuctl_version()
    name = f"localhost/{definition.name}:{version}"
    debs = [
        *rootfs.local_debs(definition, dist, version),
        *rootfs.user_space_debs(definition, architecture),
    ]
    epoch = source_epoch()
    folder = work / f"{definition.name}-{architecture}"
    root, log = folder / "root", folder / "build.log"
    with workspace.owned(folder):  # mmdebstrap's mounts inside go, however it ends
        rootfs.debootstrap(definition, architecture, debs, root, epoch, log)
    rootfs.install_wheels(definition, architecture, root, log)
    stem = definition.stem(version, architecture)
    layer = write_layer(root, folder / "layer.tar.gz", epoch)
    images = dist / "images"
    config = image_config(definition, architecture, name, version, epoch)
    components = [("deb", c) for c in sbom.debian_packages(root, definition.suite)]
    if definition.wheels is not None:
        target = root / definition.wheels.target.lstrip("/")
        components += [("pypi", c) for c in sbom.wheels(target)]
    document = sbom.document(
        name,
        version,
        config.created,
        f"{config.labels['org.opencontainers.image.source'].rstrip('/')}/spdx/{stem}-"
        f"{layer.diff_id.split(':')[1]}",
        components,
    )
    sbom_path = images / f"{stem}.spdx.json"
    write_atomically(sbom_path, json.dumps(document, indent=1, sort_keys=True) + "\n")
    archive = write_archive(config, layer, images / f"{stem}.oci.tar")
    built = Built(name, architecture, archive, sbom_path, config.labels[REVISION_LABEL])
    write_atomically(images / f"{stem}.json", json.dumps(built.summary(), indent=1) + "\n")
    shutil.rmtree(root, ignore_errors=True)  # 200 MB a tree; the archive has it all
    return built
