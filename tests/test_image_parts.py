"""The parts of 'make image' that need no root and no archive: the layer's bytes depend on the
tree's content alone, the SBOM lists what dpkg and pip installed, and every NPU family's
default image is one images/ describes."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from npuctl.families import all_platforms
from oci_image import rootfs
from oci_image.archive import Healthcheck, ImageConfig, write_archive
from oci_image.definition import image_names, load
from oci_image.errors import ImageError
from oci_image.layer import write_layer
from oci_image.sbom import debian_packages, wheels

EPOCH = 1_700_000_000


def tree(root: Path, mtime: int) -> Path:
    (root / "usr/bin").mkdir(parents=True)
    (root / "usr/bin/tool").write_text("#!/bin/sh\n")
    (root / "usr/bin/tool").chmod(0o755)
    os.link(root / "usr/bin/tool", root / "usr/bin/same-tool")
    (root / "usr/bin/link").symlink_to("tool")
    for scratch in ("dev", "proc", "tmp", "run"):
        (root / scratch).mkdir()
    (root / "tmp/left-by-a-build").write_text("x")
    (root / "dev/null-ish").write_text("")
    for path in [root, *root.rglob("*")]:
        os.utime(path, (mtime, mtime), follow_symlinks=False)
    return root


def test_a_layer_depends_on_the_content_alone(tmp_path: Path):
    first = write_layer(tree(tmp_path / "a", EPOCH + 500), tmp_path / "a.tar.gz", EPOCH)
    second = write_layer(tree(tmp_path / "b", EPOCH + 99_999), tmp_path / "b.tar.gz", EPOCH)
    assert (first.digest, first.diff_id) == (second.digest, second.diff_id)
    assert first.path.read_bytes() == second.path.read_bytes()
    assert first.path.read_bytes()[8] == 0  # gzip's XFL: the default level, as Docker writes
    with tarfile.open(first.path) as archive:
        members = {member.name: member for member in archive.getmembers()}
    assert set(members) >= {"dev", "tmp", "usr/bin/tool", "usr/bin/link", "usr/bin/same-tool"}
    assert "tmp/left-by-a-build" not in members and "dev/null-ish" not in members
    assert members["usr/bin/same-tool"].islnk() or members["usr/bin/tool"].islnk()
    assert members["usr/bin/link"].issym() and members["usr/bin/link"].linkname == "tool"
    assert all(member.mtime == EPOCH for member in members.values())
    assert all(member.uname == member.gname == "" for member in members.values())
    older = write_layer(tree(tmp_path / "c", EPOCH - 10), tmp_path / "c.tar.gz", EPOCH)
    assert older.digest != first.digest  # times before the epoch are kept


def test_an_archive_is_whole_or_absent(tmp_path: Path):
    layer = write_layer(tree(tmp_path / "a", EPOCH), tmp_path / "a.tar.gz", EPOCH)
    image = ImageConfig(
        "localhost/x:1",
        "arm64",
        "65534:65534",
        ["npuctl"],
        ["serve"],
        [],
        [8340],
        {},
        "SIGTERM",
        Healthcheck(["true"]),
        EPOCH,
        "test",
    )
    target = tmp_path / "out" / "x.oci.tar"
    written = write_archive(image, layer, target)
    with tarfile.open(target) as archive:
        names = archive.getnames()
        index = json.load(io.BytesIO(archive.extractfile("index.json").read()))  # type: ignore[union-attr]
    assert {"oci-layout", "index.json", "manifest.json"} <= set(names)
    assert index["manifests"][0]["digest"] == written.manifest_digest
    assert index["manifests"][0]["platform"] == {
        "architecture": "arm64",
        "os": "linux",
        "variant": "v8",
    }
    assert oct(target.stat().st_mode & 0o777) == "0o644"
    layer.path.unlink()  # a layer gone mid-way: nothing is left behind, not even a temporary
    with pytest.raises(FileNotFoundError):
        write_archive(image, layer, tmp_path / "out" / "y.oci.tar")
    assert sorted(path.name for path in target.parent.iterdir()) == ["x.oci.tar"]


def test_the_sbom_lists_what_dpkg_and_pip_installed(tmp_path: Path):
    status = tmp_path / "var/lib/dpkg/status"
    status.parent.mkdir(parents=True)
    status.write_text(
        "Package: libpython3.13-stdlib\nStatus: install ok installed\nArchitecture: arm64\n"
        "Source: python3.13\nVersion: 3.13.5-2\nMaintainer: Matthias Klose <doko@debian.org>\n"
        "Description: stdlib\n continued line\n\n"
        "Package: removed\nStatus: deinstall ok config-files\nArchitecture: all\nVersion: 1\n\n"
        "Package: npuctl\nStatus: install ok installed\nArchitecture: all\nVersion: 0.2.0\n"
    )
    found = {c.name: c for c in debian_packages(tmp_path, "trixie")}
    assert set(found) == {"libpython3.13-stdlib", "npuctl"}
    assert found["libpython3.13-stdlib"].purl == (
        "pkg:deb/debian/libpython3.13-stdlib@3.13.5-2?arch=arm64&distro=debian-13"
        "&upstream=python3.13"
    )
    info = tmp_path / "python/ai_edge_litert-2.3.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: ai-edge-litert\nVersion: 2.3.0\nAuthor: Google AI Edge\n"
    )
    (litert,) = wheels(tmp_path / "python")
    assert litert.purl == "pkg:pypi/ai-edge-litert@2.3.0"


def test_every_family_has_its_image_described():
    described = {name: load(name) for name in image_names()}
    for platform in all_platforms():
        if not platform.serves:
            continue
        definition = described[platform.container_image]
        assert platform.name in definition.families
        assert set(definition.architectures) == {"arm64", "amd64"}
    rocket = described["npuctl-rocket"]
    assert rocket.wheels is not None
    text = rocket.wheels.requirements.read_text()
    assert text.count("--hash=sha256:") == len(rocket.architectures)
    with pytest.raises(ImageError, match="no image 'nope'"):
        load("nope")


@pytest.mark.parametrize(
    ("given", "expected"), [(None, "max,pauth-impdef=on"), ("cortex-a76", "cortex-a76")]
)
def test_mmdebstrap_runs_the_maintainer_scripts_on_the_faster_emulated_cpu(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, given: str | None, expected: str
):
    """qemu-user takes QEMU_CPU from each program's environment: the build hands it down
    (a caller's own choice wins) along with the reproducibility settings."""
    seen: list[dict[str, str]] = []

    def run_group(command: list[str], **options: object) -> int:
        seen.append(options["env"])  # type: ignore[arg-type]
        return 0

    monkeypatch.setattr(rootfs.workspace, "run_group", run_group)
    monkeypatch.setattr(rootfs.shutil, "which", lambda name: f"/usr/bin/{name}")
    if given is None:
        monkeypatch.delenv("QEMU_CPU", raising=False)
    else:
        monkeypatch.setenv("QEMU_CPU", given)
    image = load(image_names()[0])
    rootfs.debootstrap(image, "arm64", [], tmp_path / "root", EPOCH, tmp_path / "build.log")
    [environment] = seen
    assert environment["QEMU_CPU"] == expected
    assert environment["SOURCE_DATE_EPOCH"] == str(EPOCH)


def test_an_image_carries_the_user_space_build_its_family_wants(monkeypatch):
    """npuctl-rocket asks for its family's user space: on arm64 the wanted Teflon build's
    .debs (dkms/rocket-dkms.yaml's user_space, each pinned by checksum), on amd64, for which
    Debian builds no Teflon, none; an image that does not ask gets none."""
    import yaml

    from pipeline.config import load_package

    described = load_package("rocket-dkms").user_space
    assert described is not None
    document = yaml.safe_load(described.read_text(encoding="utf-8"))
    wanted = next(b for b in document["builds"] if b["version"] == document["wanted"])
    asked: list[list[dict]] = []
    monkeypatch.setattr(
        rootfs, "pinned_debs", lambda debs, _where: asked.append(debs) or [Path("x.deb")]
    )
    rocket = load("npuctl-rocket")
    assert rocket.user_space and rootfs.user_space_debs(rocket, "arm64") == [Path("x.deb")]
    assert asked == [wanted["debs"]]
    assert rootfs.user_space_debs(rocket, "amd64") == []
    assert rootfs.user_space_debs(load("npuctl"), "arm64") == []
    assert "mesa-teflon-delegate" not in str(rocket.archive_packages)


_STOPPABLE = """
import sys
from oci_image import workspace
if sys.argv[1] == "handled":
    workspace.stop_on_signals()
try:
    print("running", flush=True)
    workspace.run_group(["sleep", "30"])
except KeyboardInterrupt:
    sys.exit(130)
"""


@pytest.mark.parametrize(("handled", "stops"), [("handled", True), ("control", False)])
def test_a_build_started_with_sigint_ignored_still_stops_on_it(handled: str, stops: bool):
    """A script's background job ('make test &') starts with SIGINT ignored, which Python
    keeps: the build's own handling makes Ctrl-C stop it all the same (the control, without
    it, does not stop)."""
    process = subprocess.Popen(
        [sys.executable, "-c", _STOPPABLE, handled],
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None and process.stdout.readline() == "running\n"
        process.send_signal(signal.SIGINT)
        if stops:
            assert process.wait(20) == 130
        else:
            with pytest.raises(subprocess.TimeoutExpired):
                process.wait(2)
    finally:
        process.kill()
        process.wait()
