"""The guarded first load proven in QEMU: a machine with a disk boots again and again, under
oops=panic panic=1, as a board whose driver crashes in its probe would.

The guest is the lab's busybox initramfs plus an ext4 disk mounted at /var/lib (the trial
records must outlive a panic), the package's own guard (module-trial, rendered from its
description) and two small stand-ins for kmod (busybox's modprobe has no --ignore-install,
its modinfo no -k); the init runs the guard where kmod would, for the device the lab's
device-tree node describes. The modules on trial are built in the suite's chroot:

- a test-only stand-in of the driver (same module name, platform driver and device-tree
  match), built twice: version lab-oops dereferences NULL in its probe, version lab-fixed
  registers the device node and passes; nothing of it is shipped;
- the package's real module, as DKMS built it for the kernel.

Boots, one disk: 1 the oopsing build (the trial starts, the kernel panics), 2 the same build
(held: not loaded, one kernel-log line), 3 the fixed build (a new trial, passed), 4 it again
(loaded as any module, no trial), 5 the real module (its own first trial, which the machine
survives: in QEMU the probe fails cleanly, as the matrix's boots show).
"""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.config import load_package
from pipeline.render import render_file, template_context
from pipeline.tools import run

from . import qemu
from .chroot import Chroot
from .drivers import Driver
from .kernels import Kernel

DISK_MB = 16
TRIAL_SCHEMA = 1  # of dist/kernel-trials.json
STAND_IN = r"""// SPDX-License-Identifier: GPL-2.0
/* The kernel lab's stand-in of a driver on trial: LAB_OOPS makes its probe crash. */
#include <linux/miscdevice.h>
#include <linux/mod_devicetable.h>
#include <linux/module.h>
#include <linux/platform_device.h>

static struct miscdevice lab_node = {
	.minor = MISC_DYNAMIC_MINOR,
	.name = "lab_stand_in",
	.nodename = LAB_NODE,
};

static int lab_probe(struct platform_device *pdev)
{
#ifdef LAB_OOPS
	int *volatile nothing = NULL;

	dev_info(&pdev->dev, "lab stand-in " LAB_VERSION ": crashing in probe\n");
	return *nothing;
#else
	dev_info(&pdev->dev, "lab stand-in " LAB_VERSION ": probed\n");
	return misc_register(&lab_node);
#endif
}

static const struct of_device_id lab_ids[] = {
	{ .compatible = LAB_COMPATIBLE },
	{ }
};
MODULE_DEVICE_TABLE(of, lab_ids);

static struct platform_driver lab_driver = {
	.probe = lab_probe,
	.driver = { .name = LAB_DRIVER, .of_match_table = lab_ids },
};
module_platform_driver(lab_driver);

MODULE_LICENSE("GPL");
MODULE_VERSION(LAB_VERSION);
MODULE_DESCRIPTION("kernel lab stand-in of a driver on trial (never shipped)");
"""

# busybox's modprobe and modinfo, as the guard calls kmod's.
MODPROBE = """#!/bin/sh
[ "$1" = --ignore-install ] && shift
exec /bin/busybox modprobe "$@"
"""
MODINFO = """#!/bin/sh
# modinfo -F FIELD -k RELEASE MODULE: busybox's modinfo reads the running kernel's modules.
while [ "$#" -gt 1 ]; do
	case $1 in -F) field=$2; shift 2 ;; -k) shift 2 ;; *) shift ;; esac
done
exec /bin/busybox modinfo -F "$field" "$1"
"""


def init_script(driver: Driver, guard: str) -> str:
    package, module = driver.package, driver.module
    return f"""#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/usr/local/bin:/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
echo "LAB: booted $(uname -r), boot id $(cat /proc/sys/kernel/random/boot_id)"
for disk in $(cat /lab-disk-modules); do modprobe -q "$disk"; done
mkdir -p /var/lib
if mount -t ext4 /dev/vda /var/lib; then echo "LAB: disk mounted"; else echo "LAB: no disk"; fi
echo "LAB: version $(/usr/local/bin/modinfo -F version -k "$(uname -r)" {module})"
# What kmod does for udev's modprobe of the device's modalias: the package's install line.
if {guard} load; then echo "LAB: guard loaded it"; else echo "LAB: guard exit $?"; fi
[ -d /sys/module/{module} ] && echo "LAB: module loaded"
for entry in /sys/bus/platform/drivers/{driver.platform_driver}/*; do
	[ -L "$entry" ] && [ "${{entry##*/}}" != module ] && echo "LAB: bound ${{entry##*/}}"
done
for record in /var/lib/{package}/trials/*; do echo "LAB: record ${{record##*/}}"; done
dmesg | grep "{package}:" | sed 's/^/LAB: kmsg /'
dmesg | grep -e "{driver.platform_driver}" -e "{driver.probe_evidence}" | sed 's/^/LAB: dmesg /'
sync
umount /var/lib
poweroff -f
"""


@dataclass
class TrialBoot:
    name: str
    console: str
    seconds: float
    facts: dict[str, object] = field(default_factory=dict)

    def marker(self, text: str) -> bool:
        return f"LAB: {text}" in self.console

    @property
    def records(self) -> list[str]:
        return re.findall(r"LAB: record (\S+)", self.console)

    @property
    def kmsg(self) -> list[str]:
        return re.findall(r"LAB: kmsg (.+)", self.console)

    @property
    def panicked(self) -> bool:
        return "Kernel panic" in self.console


def compatible(driver: Driver) -> str:
    found = re.search(r'compatible\s*=\s*"([^"]+)"', driver.device_tree_node)
    if not found:
        raise ValueError(f"{driver.package}: the lab's device-tree node has no compatible")
    return found[1]


def build_stand_in(chroot: Chroot, kernel: Kernel, driver: Driver, version: str) -> Path:
    """The test-only stand-in module for ``kernel``, built by kbuild in the chroot."""
    inside = f"/tmp/lab-stand-in-{version}"
    folder = chroot.path(inside)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    # The node the package's guard waits for (an accel node's pattern, numbered 0).
    node = load_package(driver.package).device["node"].replace("*", "0")
    defines = [
        f'-DLAB_VERSION=\\"{version}\\"',
        f'-DLAB_NODE=\\"{node}\\"',
        f'-DLAB_DRIVER=\\"{driver.platform_driver}\\"',
        f'-DLAB_COMPATIBLE=\\"{compatible(driver)}\\"',
        *(["-DLAB_OOPS"] if "oops" in version else []),
    ]
    (folder / f"{driver.module}.c").write_text(STAND_IN, encoding="utf-8")
    (folder / "Kbuild").write_text(
        f"obj-m := {driver.module}.o\nccflags-y += {' '.join(defines)}\n", encoding="utf-8"
    )
    chroot.run(
        f"make -C /usr/src/linux-headers-{kernel.release} M={inside} ARCH=arm64 "
        "CROSS_COMPILE=aarch64-linux-gnu- modules",
        timeout=600,
    )
    return folder / f"{driver.module}.ko"


def disk_modules(tree: Path) -> list[Path]:
    """The disk's transport (virtio-mmio), virtio-blk and ext4 with what they need (crc32c,
    which ext4 asks for at mount time), uncompressed, where the kernel builds them as
    modules."""
    found: list[Path] = []
    for name in ("virtio_mmio", "virtio_blk", "crc32c_generic", "ext4"):
        matches = [p for p in tree.rglob(f"{name}.ko*")]
        if not matches:
            continue  # built into this kernel
        wanted = [matches[0]]
        while wanted:
            path = qemu._uncompressed(wanted.pop(), tree.parent / "uncompressed")
            if path in found:
                continue
            found.insert(0, path)
            for dependency in qemu._depends(path):
                wanted += list(tree.rglob(f"{dependency}.ko*")) or list(
                    tree.rglob(f"{dependency.replace('_', '-')}.ko*")
                )
    return found


def guard_files(driver: Driver) -> dict[str, str]:
    """The package's own guard, rendered from its description: path -> text."""
    config = load_package(driver.package)
    context = template_context(config)
    return {
        board_file.installed_path: render_file(board_file.source, context)
        for board_file in config.board_files
        if board_file.name == "module-trial"
    }


def make_initrd(
    directory: Path, busybox: Path, release: str, module: Path, driver: Driver, disk: list[Path]
) -> Path:
    root = directory / "root"
    shutil.rmtree(root, ignore_errors=True)
    for sub in ("bin", "proc", "sys", "dev", "usr/local/bin"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    shutil.copyfile(busybox, root / "bin/busybox")
    (root / "bin/busybox").chmod(0o755)
    for name, text in (("modprobe", MODPROBE), ("modinfo", MODINFO)):
        (root / "usr/local/bin" / name).write_text(text, encoding="utf-8")
        (root / "usr/local/bin" / name).chmod(0o755)
    (guard_path, guard_text), *_ = guard_files(driver).items()
    guard = root / guard_path.lstrip("/")
    guard.parent.mkdir(parents=True)
    # busybox's shell runs its own applets before anything on PATH: the guard's two kmod
    # calls are pointed at the stand-ins by path, nothing else of it changes.
    guard_text = guard_text.replace("#!/bin/sh", "#!/bin/busybox sh", 1)
    for name in ("modprobe", "modinfo"):
        guard_text = re.sub(rf"(?m)(^|\s|\$\(){name} ", rf"\1/usr/local/bin/{name} ", guard_text)
    guard.write_text(guard_text, encoding="utf-8")
    guard.chmod(0o755)
    modules = root / "lib/modules" / release
    (modules / "updates/dkms").mkdir(parents=True)
    shutil.copyfile(module, modules / "updates/dkms" / f"{driver.module}.ko")
    (modules / "kernel").mkdir()
    for path in disk:
        shutil.copyfile(path, modules / "kernel" / path.name)
    run(["depmod", "-b", root, release], failure="depmod of the guest's modules")
    (root / "lab-disk-modules").write_text(
        " ".join(path.stem for path in disk) + "\n", encoding="utf-8"
    )
    (root / "init").write_text(init_script(driver, guard_path), encoding="utf-8")
    (root / "init").chmod(0o755)
    archive = directory / "initrd.cpio"
    qemu.cpio(root, archive)
    return archive


def make_disk(path: Path) -> None:
    with tempfile.TemporaryDirectory() as empty:
        run(
            ["mkfs.ext4", "-q", "-F", "-d", empty, path, f"{DISK_MB}M"],
            failure="making the trial disk",
        )


def boot(image: Path, initrd: Path, dtb: Path, disk: Path, timeout: float = 300) -> TrialBoot:
    command = qemu._qemu_command(
        image,
        initrd,
        dtb,
        [
            "-drive",
            f"if=none,id=trial,format=raw,file={disk}",
            "-device",
            "virtio-blk-device,drive=trial",
        ],
        kernel_arguments="oops=panic panic=1",
    )
    console, seconds = qemu._run_guest(command, timeout)
    return TrialBoot("", console, seconds)


@dataclass
class TrialRow:
    """One boot of the proof and whether it did what it must."""

    boot: str
    expected: str
    ok: bool
    detail: str
    seconds: float

    def as_dict(self) -> dict[str, object]:
        return {
            "boot": self.boot,
            "expected": self.expected,
            "status": "ok" if self.ok else "failed",
            "detail": self.detail,
            "seconds": round(self.seconds, 1),
        }


def _verdict(
    name: str, expected: str, result: TrialBoot, checks: list[tuple[bool, str]]
) -> TrialRow:
    misses = [what for ok, what in checks if not ok]
    crash = [
        re.sub(r"^\[\s*[\d.]+\]\s*", "", line.strip())
        for line in result.console.splitlines()
        if re.search(r"\bpc : |Kernel panic", line)
    ]
    seen = "; ".join(crash[:2] or result.kmsg[-1:] or result.records or ["no kernel-log line"])
    detail = ("missing: " + ", ".join(misses) + f" (saw: {seen})") if misses else seen
    return TrialRow(name, expected, not misses, detail, result.seconds)


def prove(
    chroot: Chroot,
    kernel: Kernel,
    driver: Driver,
    real_module: Path | None,
    image: Path,
    busybox: Path,
    modules_tree: Path,
    directory: Path,
    log: Callable[[str], None] = print,
) -> list[TrialRow]:
    """The five boots on one disk (module docstring); a row each."""
    directory.mkdir(parents=True, exist_ok=True)
    disk = directory / "disk.img"
    make_disk(disk)
    dtb = qemu.device_tree(directory, image, driver)
    disk_kos = disk_modules(modules_tree)
    oops = build_stand_in(chroot, kernel, driver, "lab-oops")
    fixed = build_stand_in(chroot, kernel, driver, "lab-fixed")
    key = f"{kernel.release}@"
    rows = []

    def run_boot(name: str, module: Path, needs: list[Path] = ()) -> TrialBoot:
        # The kernel's own modules the module needs (rocket: DRM's) go in beside the disk's.
        initrd = make_initrd(
            directory / name, busybox, kernel.release, module, driver, [*disk_kos, *needs]
        )
        result = boot(image, initrd, dtb, disk)
        result.name = name
        log(f"{name}\n{result.console}")
        return result

    first = run_boot("1-oops", oops)
    rows.append(
        _verdict(
            "1 stand-in lab-oops",
            "the trial starts, the probe oopses, the kernel panics",
            first,
            [
                (first.marker("disk mounted"), "the disk"),
                ("trial of " in first.console, "the trial's start line"),
                (first.panicked, "the panic"),
                ("lab_probe" in first.console, "the oops in the stand-in's probe"),
            ],
        )
    )
    second = run_boot("2-held", oops)
    rows.append(
        _verdict(
            "2 stand-in lab-oops again",
            "held: not loaded, one kernel-log line, the boot goes on",
            second,
            [
                (not second.panicked, "no panic"),
                (second.marker("guard exit 1"), "the guard refused"),
                (not second.marker("module loaded"), "not loaded"),
                (f"{key}lab-oops.held" in second.records, "the held record"),
                (len([k for k in second.kmsg if "is held" in k]) == 1, "one 'is held' line"),
            ],
        )
    )
    third = run_boot("3-fixed", fixed)
    rows.append(
        _verdict(
            "3 stand-in lab-fixed",
            "a new version, one new trial, which passes",
            third,
            [
                (not third.panicked, "no panic"),
                (third.marker("module loaded") and third.marker("bound "), "loaded and bound"),
                (f"{key}lab-fixed.passed" in third.records, "the passed record"),
                (f"{key}lab-oops.held" in third.records, "the old build still held"),
                (any("passed" in k for k in third.kmsg), "the passed line"),
            ],
        )
    )
    fourth = run_boot("4-fixed-again", fixed)
    rows.append(
        _verdict(
            "4 stand-in lab-fixed again",
            "loaded as any module: no trial, no line",
            fourth,
            [
                (fourth.marker("module loaded"), "loaded"),
                (not fourth.kmsg, "no kernel-log line"),
            ],
        )
    )
    if real_module is not None:
        fifth = run_boot(
            "5-real",
            real_module,
            qemu.kernel_module_dependencies(chroot, kernel.release, real_module),
        )
        version = re.search(r"LAB: version (\S+)", fifth.console)
        real_key = f"{key}{version[1] if version else '?'}"
        rows.append(
            _verdict(
                f"5 {driver.package}'s module",
                "its own first trial, which the machine survives",
                fifth,
                [
                    (not fifth.panicked, "no panic"),
                    (
                        f"{real_key}.passed" in fifth.records
                        or f"{real_key}.survived" in fifth.records,
                        "a closed trial (passed, or survived where QEMU has no NPU)",
                    ),
                    (
                        driver.probe_evidence in fifth.console or fifth.marker("bound "),
                        "the probe ran",
                    ),
                ],
            )
        )
    return rows


def run_trials(suite_name: str, driver: Driver, deb: Path | None, workdir: Path) -> dict:
    """The proof on ``suite_name``'s current arm64 kernel: a report (JSON-ready)."""
    from . import kernels, scenarios
    from .chroot import create_chroot
    from .suites import SUITES

    suite = SUITES[suite_name]
    chroot = create_chroot(suite, workdir)
    log_path = workdir / f"trial-{suite_name}-{driver.package}.log"
    with chroot.mounted(), log_path.open("w", encoding="utf-8") as log:
        chroot.refresh_lists()
        kernel = kernels.resolve(chroot, target_release=suite.target_release)
        kernels.install(chroot, kernel, target_release=suite.target_release)
        real = None
        if deb is not None:
            step = scenarios.install_deb(chroot, deb)
            log.write(step.output)
            modules = scenarios.installed_modules(chroot, kernel, driver.module)
            if step.ok and modules:
                # A folder of its own each run: _uncompressed keeps what a folder has.
                built = workdir / f"dkms-built-{driver.package}-{kernel.release}"
                shutil.rmtree(built, ignore_errors=True)
                real = qemu._uncompressed(chroot.path(modules[0]), built)
        rows = prove(
            chroot,
            kernel,
            driver,
            real,
            qemu.kernel_image(chroot, kernel.release),
            qemu.busybox(chroot),
            qemu.modules_tree(chroot, kernel.release),
            workdir / f"trial-{suite_name}-{driver.package}",
            log=lambda text: log.write(text + "\n"),
        )
    chroot.remove()
    return {
        "suite": suite_name,
        "kernel": kernel.release,
        "package": driver.package,
        "log": str(log_path),
        "boots": [row.as_dict() for row in rows],
    }
