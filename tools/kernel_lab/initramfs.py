"""A driver module loaded from a real initramfs: initramfs-tools' own mkinitramfs, with the
hook its package installs (a board file under /usr/share/initramfs-tools/hooks/), builds the
initramfs of an arm64 kernel in the suite's chroot; the guest boots the modules,
conf/modules and scripts/functions it made, and loads them with initramfs-tools' own
load_modules, before any root file system.

The chroot is amd64, so the initramfs's programs are amd64: they are replaced by arm64
busybox, and the rest (what the hooks decided: modules, conf/modules, the shell functions)
is booted as mkinitramfs wrote it. The same initramfs built without the package's hook is
the control: the module must then not load.

The hook takes only a build whose first load, from the root file system, finished its trial
(the package's module-trial guard; a load from the initramfs has nowhere to record one): an
initramfs made before any trial must not list the module; the booted one is made after the
lab records a finished trial of the build, as the guard writes it.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from pipeline.tools import run

from . import qemu
from .chroot import Chroot
from .drivers import Driver

INIT = """#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/sbin:/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
echo "LAB: booted $(uname -r)"
echo "LAB: conf/modules: $(cat /conf/modules 2>/dev/null | tr '\\n' ' ')"
# initramfs-tools' own loading of conf/modules (its init calls it before the root is mounted)
. /scripts/functions
load_modules
[ -d /sys/module/{module} ] && echo "LAB: {module} loaded from the initramfs"
echo "LAB: dmesg begin"
dmesg
echo "LAB: dmesg end"
poweroff -f
"""


@dataclass
class InitramfsBoot:
    with_hook: qemu.BootResult
    without_hook: qemu.BootResult
    listed: bool  # the hook put the module in conf/modules
    listed_untried: bool = False  # ... before the build had finished a trial

    def problems(self, driver: Driver) -> list[str]:
        found = []
        if not self.listed:
            found.append(f"the hook did not list {driver.module} in conf/modules")
        if self.listed_untried:
            found.append(f"the hook listed {driver.module} before its build finished a trial")
        if f"LAB: {driver.module} loaded from the initramfs" not in self.with_hook.console:
            found.append(f"{driver.module} was not loaded from the initramfs")
        if driver.probe_evidence not in self.with_hook.dmesg:
            found.append("the probe did not run from the initramfs")
        if f"LAB: {driver.module} loaded" in self.without_hook.console:
            found.append(f"{driver.module} loaded without the hook too: the control proves nothing")
        found += [f"kernel fault: {line}" for line in self.with_hook.faults[:2]]
        if not self.with_hook.dmesg:
            found.append("the guest did not finish (no dmesg dump)")
        return found


@contextmanager
def _kernel_modules(chroot: Chroot, release: str) -> Iterator[None]:
    """The kernel's own modules at /lib/modules/<release>/kernel, as its package installs them."""
    target = chroot.path(f"/lib/modules/{release}/kernel")
    target.mkdir(parents=True, exist_ok=True)
    run(
        ["mount", "--bind", qemu.modules_tree(chroot, release), target],
        failure="mounting the kernel's modules in the chroot",
    )
    try:
        yield
    finally:
        run(["umount", "--lazy", target], check=False, failure="unmounting the kernel's modules")


def _mkinitramfs(chroot: Chroot, release: str, output: str) -> str:
    result = chroot.run(f"mkinitramfs -c gzip -o {output} {release} 2>&1", check=False)
    if result.returncode != 0:
        raise RuntimeError(f"mkinitramfs exited {result.returncode}: {result.stdout[-300:]}")
    return result.stdout


def _bootable(unpacked: Path, busybox: Path, driver: Driver, directory: Path) -> Path:
    """What the hooks put in the initramfs unpacked at ``unpacked`` (modules, conf, scripts)
    with arm64 busybox and a lab init in place of the amd64 programs."""
    main = unpacked / "main" if (unpacked / "main").is_dir() else unpacked
    root = directory / "root"
    for keep in ("conf", "scripts", "lib/modules", "usr/lib/modules"):
        if (main / keep).exists():
            shutil.copytree(main / keep, root / keep, symlinks=True)
    for sub in ("bin", "sbin", "proc", "sys", "dev"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    if (root / "usr/lib/modules").is_dir() and not (root / "lib/modules").exists():
        (root / "lib").mkdir(exist_ok=True)
        (root / "lib/modules").symlink_to("../usr/lib/modules")
    shutil.copyfile(busybox, root / "bin/busybox")
    (root / "bin/busybox").chmod(0o755)
    (root / "sbin/modprobe").symlink_to("../bin/busybox")
    (root / "init").write_text(INIT.replace("{module}", driver.module), encoding="utf-8")
    (root / "init").chmod(0o755)
    archive = directory / "boot.cpio"
    qemu.cpio(root, archive)
    return archive


def boot_from_initramfs(
    chroot: Chroot, release: str, driver: Driver, log: Callable[[str, str], None]
) -> InitramfsBoot:
    chroot.apt_install("initramfs-tools")
    chroot.run(f"cp /usr/src/linux-headers-{release}/.config /boot/config-{release}")
    # Only what the hooks ask for: no modules picked from this (amd64) machine's hardware.
    chroot.path("/etc/initramfs-tools/conf.d").mkdir(parents=True, exist_ok=True)
    chroot.path("/etc/initramfs-tools/conf.d/lab.conf").write_text(
        "MODULES=list\n", encoding="utf-8"
    )
    image = qemu.kernel_image(chroot, release)
    busybox = qemu.busybox(chroot)
    results: dict[bool, qemu.BootResult] = {}
    listed = False
    with (
        _kernel_modules(chroot, release),
        tempfile.TemporaryDirectory(prefix="lab-initramfs-") as scratch,
    ):
        chroot.run(f"depmod -a {release}")
        listed_untried = _listed_before_a_trial(chroot, release, driver)
        _record_a_finished_trial(chroot, release, driver)
        hook = chroot.path(driver.initramfs_hook)
        saved = Path(scratch) / "hook"
        shutil.copy2(hook, saved)
        for with_hook in (True, False):
            if not with_hook:
                hook.unlink()
            try:
                output = _mkinitramfs(chroot, release, f"/tmp/lab-initrd-{with_hook}")
            finally:
                if not hook.exists():
                    shutil.copy2(saved, hook)
            log(
                f"mkinitramfs for {release} ({'with' if with_hook else 'without'} the hook)", output
            )
            directory = Path(scratch) / str(with_hook)
            directory.mkdir()
            unpacked = f"/tmp/lab-unpacked-{with_hook}"
            chroot.run(f"rm -rf {unpacked} && unmkinitramfs /tmp/lab-initrd-{with_hook} {unpacked}")
            bootable = _bootable(chroot.path(unpacked), busybox, driver, directory)
            if with_hook:
                conf = directory / "root/conf/modules"
                listed = conf.exists() and driver.module in conf.read_text().split()
            results[with_hook] = qemu.boot_initrd(image, bootable, driver, directory)
            log(f"qemu initramfs boot {release} with_hook={with_hook}", results[with_hook].console)
        chroot.run(
            f"rm -rf /tmp/lab-initrd-* /tmp/lab-unpacked-* /boot/config-{release} "
            f"/var/lib/{driver.package}"
        )
    return InitramfsBoot(results[True], results[False], listed, listed_untried)


def _listed_before_a_trial(chroot: Chroot, release: str, driver: Driver) -> bool:
    """Whether the hook lists the module in an initramfs made before any trial of it."""
    _mkinitramfs(chroot, release, "/tmp/lab-initrd-untried")
    chroot.run("rm -rf /tmp/lab-unpacked-untried")
    chroot.run("unmkinitramfs /tmp/lab-initrd-untried /tmp/lab-unpacked-untried")
    conf = next(
        (
            path
            for path in chroot.path("/tmp/lab-unpacked-untried").rglob("conf/modules")
            if path.is_file()
        ),
        None,
    )
    return conf is not None and driver.module in conf.read_text().split()


def _record_a_finished_trial(chroot: Chroot, release: str, driver: Driver) -> None:
    """The record the package's guard writes once the build's first load bound the driver
    (module-trial; the lab has no running arm64 kernel to load it into)."""
    version = chroot.run(
        f"modinfo -F version -k {release} {driver.module}", check=False
    ).stdout.strip()
    records = chroot.path(f"/var/lib/{driver.package}/trials")
    records.mkdir(parents=True, exist_ok=True)
    (records / f"{release}@{version or 'unversioned'}.passed").write_text(
        f"module={driver.module}\nkernel={release}\nversion={version}\npassed=0\n",
        encoding="utf-8",
    )
