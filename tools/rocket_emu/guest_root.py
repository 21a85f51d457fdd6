"""The emulated board's root file system, booted as its initramfs: Debian trixie for arm64
made by mmdebstrap, with the pinned backports kernel (Image, modules, headers), this
project's .debs installed by apt (rocket-dkms's postinst has DKMS build rocket.ko for that
kernel with trixie's gcc-14, under qemu-user, as on a board; npuctl's bring in their
dependencies, and each boot installs the ones under test again), the first pinned Teflon
(the others are installed over it at boot), the pinned ai-edge-litert wheels, and the
emulator's IOMMU helper module built against the same headers. Cached by its inputs
(cache_key)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import arm64_emulation
from kernel_lab.qemu import is_arm64_image
from oci_image import definition as image_definition
from oci_image import rootfs, workspace
from oci_image.errors import ImageError
from pipeline.errors import BuildError
from pipeline.patching import patched_copy
from pipeline.tools import run

from . import sources
from .errors import EmulationError, ExitCode, Stage
from .pins import Pins, digest

IMAGE_WITH_WHEELS = "npuctl-rocket"  # the container image whose pinned wheels the board gets


@dataclass(frozen=True)
class GuestRoot:
    folder: Path

    @property
    def kernel(self) -> Path:
        return self.folder / "Image"

    @property
    def initrd(self) -> Path:
        return self.folder / "root.cpio"

    @property
    def facts(self) -> dict:
        return json.loads((self.folder / "facts.json").read_text(encoding="utf-8"))


def local_debs(pins: Pins, dist: Path) -> list[Path]:
    found = []
    for name in pins.guest["debs"]:
        debs = sorted(dist.glob(f"{name}_*_all.deb"))
        if not debs:
            raise EmulationError(
                Stage.INPUTS, f"no {name} .deb in {dist}: run 'make deb' first", ExitCode.INPUT
            )
        found.append(debs[-1].resolve())
    return found


def debs_installed_at_boot(pins: Pins, dist: Path) -> list[Path]:
    """The .debs under test that the board installs with dpkg as it boots (npuctl's)."""
    wanted = set(pins.guest["installed_at_boot"])
    return [deb for deb in local_debs(pins, dist) if deb.name.split("_")[0] in wanted]


def cache_key(pins: Pins, dist: Path) -> str:
    """The root's inputs: the pins, the helper's patches, the wheels and the .debs the root
    keeps as built (rocket-dkms, the first Teflon); not npuctl's nor the later Teflons, which
    every boot installs afresh."""
    wheels = image_definition.load(IMAGE_WITH_WHEELS).wheels
    at_boot = debs_installed_at_boot(pins, dist)
    return digest(
        {**pins.guest, "teflons": pins.teflons[:1]},
        pins.emulator,
        pins.patches("helper"),
        *(deb for deb in local_debs(pins, dist) if deb not in at_boot),
        wheels.requirements if wheels else "",
    )


def build(pins: Pins, emulator: Path, dist: Path, work: Path) -> GuestRoot:
    debs = local_debs(pins, dist)
    wheels = image_definition.load(IMAGE_WITH_WHEELS)
    for teflon in pins.teflons:  # the later ones go to the board at boot
        sources.teflon_debs(teflon)
    guest = GuestRoot(sources.cache() / f"guest-{cache_key(pins, dist)}")
    if guest.initrd.is_file():
        return guest
    started = time.monotonic()
    for tool, package in (("mmdebstrap", "mmdebstrap"), ("cpio", "cpio"), ("quilt", "quilt")):
        try:
            rootfs.tool(tool, package)
        except ImageError as error:
            raise EmulationError(Stage.INPUTS, str(error), ExitCode.INPUT) from None
    try:
        rootfs.check_emulation("arm64")
    except ImageError as error:
        raise EmulationError(Stage.INPUTS, str(error), ExitCode.INPUT) from None
    work.mkdir(parents=True, exist_ok=True)
    helper = work / "qemu-iommu-helper"
    staged = work / "helper-upstream"
    shutil.rmtree(staged, ignore_errors=True)
    staged.mkdir()
    for name in pins.emulator["guest_helper"]["files"]:
        shutil.copyfile(emulator / name, staged / name)
    try:
        patched_copy(staged, helper, pins.patches("helper"))
    except BuildError as error:
        raise EmulationError(Stage.DKMS_BUILD, str(error)) from None
    folder = work / "guest-build"
    root, log = folder / "root", work / "guest-root.log"
    try:
        with workspace.owned(folder):  # mmdebstrap's mounts inside go, however it ends
            _mmdebstrap(pins, [*debs, *sources.teflon_debs(pins.teflons[0])], helper, root, log)
    except ImageError as error:
        raise EmulationError(Stage.DKMS_BUILD, str(error)) from None
    _check_dkms(pins, root, log)
    try:
        rootfs.install_wheels(wheels, "arm64", root, log)
    except ImageError as error:
        raise EmulationError(Stage.INPUTS, str(error), ExitCode.INPUT) from None
    partial = guest.folder.with_name(guest.folder.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    _take_kernel(pins, root, partial / "Image")
    run(
        [
            "sh",
            "-c",
            f"cd '{root}' && find . | LC_ALL=C sort | cpio -o -H newc --quiet "
            f"> '{partial}/root.cpio'",
        ],
        failure="packing the guest's root file system",
    )
    facts = {
        "release": pins.release,
        "rocket_dkms": debs[0].name,
        "teflon": pins.teflon_versions[0],
        "build_seconds": round(time.monotonic() - started, 1),
    }
    (partial / "facts.json").write_text(json.dumps(facts, indent=1) + "\n", encoding="utf-8")
    shutil.rmtree(root)
    shutil.rmtree(guest.folder, ignore_errors=True)
    partial.replace(guest.folder)
    # One root is kept (about 750 MB): the ones of earlier rocket-dkms .debs go.
    for earlier in guest.folder.parent.glob("guest-*"):
        if earlier != guest.folder and not earlier.name.endswith(".partial"):
            shutil.rmtree(earlier, ignore_errors=True)
    return guest


def _mmdebstrap(pins: Pins, debs: list[Path], helper: Path, root: Path, log: Path) -> None:
    guest, release = pins.guest, pins.release
    kernel_version = guest["kernel"]["version"]
    packages = [
        *(
            f"{name}-{release}={kernel_version}"
            for name in ("linux-binary", "linux-modules", "linux-headers")
        ),
        *guest["packages"],
    ]
    module = pins.emulator["guest_helper"]["module"]
    build = (
        f'chroot "$1" make -C /lib/modules/{release}/build M=/usr/src/{module} modules && '
        f'install -D -m 0644 "$1/usr/src/{module}/{module}.ko" '
        f'"$1/lib/modules/{release}/updates/{module}.ko" && chroot "$1" depmod {release}'
    )
    command = [
        "mmdebstrap",
        "--mode=auto",
        "--variant=essential",
        "--arch=arm64",
        "--format=directory",
        *(f"--dpkgopt={option}" for option in rootfs.DPKG_OPTIONS),
        f"--include={','.join(packages)}",
        *(f"--include={deb}" for deb in debs),
        f"--hook-dir={rootfs.FILE_MIRROR_HOOK}",
        '--aptopt=Acquire::Retries "3"',
        f"--customize-hook=copy-in {helper} /usr/src",
        f'--customize-hook=mv "$1/usr/src/{helper.name}" "$1/usr/src/{module}"',
        f"--customize-hook={build}",
        guest["suite"],
        str(root),
        *(f"deb {rootfs.mirror()} {suite} main" for suite in (guest["suite"], guest["backports"])),
    ]
    with log.open("w", encoding="utf-8") as output:
        returncode = workspace.run_group(
            command,
            stdout=output,
            stderr=subprocess.STDOUT,
            env=arm64_emulation.environment({**os.environ, "LC_ALL": "C.UTF-8"}),
        )
    if returncode != 0:
        text = log.read_text(encoding="utf-8", errors="replace")
        stage = (
            Stage.KERNEL_FETCH
            if f"linux-binary-{release}" in text
            and "E: " in text
            and ("has no installation candidate" in text or "not found" in text)
            else Stage.DKMS_BUILD
        )
        errors = [line for line in text.splitlines() if line.startswith("E: ")]
        raise EmulationError(
            stage, f"mmdebstrap failed: {(errors or ['see the log'])[0]} (log: {log})"
        )


def _check_dkms(pins: Pins, root: Path, log: Path) -> None:
    """DKMS built and installed rocket.ko for the pinned kernel while apt installed it."""
    release = pins.release
    installed = list((root / f"lib/modules/{release}/updates/dkms").glob("rocket.ko*"))
    if installed:
        return
    logs = sorted(root.glob(f"var/lib/dkms/rocket/*/{release}/*/log/make.log")) + sorted(
        root.glob("var/lib/dkms/rocket/*/build/make.log")
    )
    first = next(
        (
            line.strip()
            for path in logs
            for line in path.read_text(encoding="utf-8", errors="replace").splitlines()
            if " error" in line or "Error " in line
        ),
        f"no rocket.ko for {release} (log: {log})",
    )
    raise EmulationError(Stage.DKMS_BUILD, first)


def _take_kernel(pins: Pins, root: Path, target: Path) -> None:
    """linux-binary's uncompressed Image, out of the root file system (the boot loader's)."""
    image = root / f"usr/lib/modules/{pins.release}/vmlinuz"
    if not image.is_file():
        raise EmulationError(Stage.KERNEL_FETCH, f"linux-binary-{pins.release} has no {image.name}")
    if not is_arm64_image(image):
        raise EmulationError(Stage.KERNEL_FETCH, f"{image} is not an arm64 Image")
    shutil.move(image, target)
