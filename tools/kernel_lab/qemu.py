"""Boot a Debian arm64 kernel in qemu-system-aarch64 and exercise the module from a tiny
busybox initramfs: loaded by its modalias as udev would (no insmod, no modules-load.d),
insmod, probe on a device-tree node, rmmod, load/unload cycles, and a module built for
another kernel that must be refused.

The kernel is the exact build the headers belong to (with module versioning, anything else
refuses the module). Debian ships it as an uncompressed arm64 Image, in linux-image-<release>
(/boot/vmlinuz-*) up to 6.x and in linux-binary-<release> (/usr/lib/modules/*/vmlinuz) from
7.x on, where the linux-image one is compressed for EFI.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import arm64_emulation
from pipeline.tools import require_tool, run

from .chroot import Chroot
from .drivers import Driver

ARM64_IMAGE_MAGIC = b"ARMd"  # at offset 0x38 of an arm64 Image
CYCLES = 20
# What a clean run must never print.
KERNEL_FAULTS = re.compile(r"Oops|BUG:|WARNING:|Call trace|Kernel panic|Unable to handle")


def init_script(driver: Driver, cycles: int = CYCLES) -> str:
    module, platform, acpi_id = driver.module, driver.platform_driver, driver.acpi_id or "none"
    return f"""#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
echo "LAB: booted $(uname -r)"
[ -d /sys/bus/acpi/devices/{acpi_id}:00 ] && echo "LAB: acpi device {acpi_id}:00 present"
# Coldplug as udev does it: modprobe every device's modalias; only the module's own aliases
# (from modules.alias, made by depmod) can bring it in, with the kernel modules it needs.
for alias in /sys/bus/platform/devices/*/modalias; do
	modprobe -q "$(cat "$alias")" 2>/dev/null
done
if [ -d /sys/module/{module} ]; then
	echo "LAB: autoloaded by modalias"
	rmmod {module} || echo "LAB: rmmod after autoload failed"
else
	# The modules it depends on, so the insmod below can resolve its symbols either way.
	modprobe -q -a $(cat /lab-dependencies) 2>/dev/null
fi
if insmod /{module}.ko; then echo "LAB: insmod ok"; else echo "LAB: insmod failed"; fi
[ -e /sys/bus/platform/drivers/{platform}/{acpi_id}:00 ] && echo "LAB: bound {acpi_id}:00"
[ -d /sys/bus/platform/drivers/{platform} ] && echo "LAB: driver {platform} registered"
[ -c /dev/{driver.device_node or "none"} ] && echo "LAB: device node present"
if rmmod {module}; then echo "LAB: rmmod ok"; else echo "LAB: rmmod failed"; fi
ok=0
i=0
while [ $i -lt {cycles} ]; do
	insmod /{module}.ko && rmmod {module} && ok=$((ok + 1))
	i=$((i + 1))
done
echo "LAB: cycles $ok/{cycles}"
if [ -f /foreign.ko ]; then
	if insmod /foreign.ko; then echo "LAB: foreign insmod accepted"; rmmod {module}
	else echo "LAB: foreign insmod refused"; fi
fi
echo "LAB: dmesg begin"
dmesg
echo "LAB: dmesg end"
poweroff -f
"""


@dataclass
class BootResult:
    kernel: str
    seconds: float
    console: str
    driver: Driver
    cycles: int = CYCLES
    facts: dict[str, str] = field(default_factory=dict)

    def marker(self, text: str) -> bool:
        return f"LAB: {text}" in self.console

    @property
    def dmesg(self) -> str:
        start = self.console.find("LAB: dmesg begin")
        end = self.console.find("LAB: dmesg end")
        return self.console[start:end] if start >= 0 and end > start else ""

    @property
    def faults(self) -> list[str]:
        return [line.strip() for line in self.console.splitlines() if KERNEL_FAULTS.search(line)]

    def lifecycle_problems(self) -> list[str]:
        """insmod, the driver registered, rmmod, every load/unload cycle, no kernel fault."""
        markers = (
            "autoloaded by modalias",
            "insmod ok",
            f"driver {self.driver.platform_driver} registered",
            "rmmod ok",
            f"cycles {self.cycles}/{self.cycles}",
        )
        found = [f"missing '{marker}'" for marker in markers if not self.marker(marker)]
        found += [f"kernel fault: {line}" for line in self.faults[:3]]
        if not self.dmesg:
            found.append("the guest did not finish (no dmesg dump)")
        return found

    def problems(self, *, expect_foreign_refusal: bool) -> list[str]:
        """Everything that is not as a clean device-tree run must be; empty when all is well."""
        found = self.lifecycle_problems()
        if self.driver.probe_evidence not in self.dmesg:
            found.append("the probe did not run")
        if expect_foreign_refusal:
            if not self.marker("foreign insmod refused"):
                found.append("a module built for another kernel was not refused")
            elif not re.search(r"version magic|disagrees about version", self.dmesg):
                found.append("the refusal was not a version-magic error")
        return found


def kernel_image(chroot: Chroot, release: str) -> Path:
    """The uncompressed arm64 Image of ``release``, downloaded into the shared apt cache."""
    cache = chroot.path("/var/cache/apt/archives")
    for package, member in (
        (f"linux-image-{release}", f"./boot/vmlinuz-{release}"),
        (f"linux-binary-{release}", f"./usr/lib/modules/{release}/vmlinuz"),
    ):
        debs = sorted(cache.glob(f"{package}_*_arm64.deb"))
        if not debs:
            result = chroot.run(
                f"cd /var/cache/apt/archives && apt-get download -q {package}:arm64", check=False
            )
            if result.returncode != 0:
                continue
            debs = sorted(cache.glob(f"{package}_*_arm64.deb"))
        target = cache.parent / "lab-images" / f"{release}.Image"
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory() as scratch:
            unpacked = run(
                [
                    "sh",
                    "-c",
                    f"dpkg-deb --fsys-tarfile '{debs[-1]}' | tar -x -C '{scratch}' '{member}'",
                ],
                check=False,
                failure=f"unpacking {debs[-1].name}",
            )
            image = Path(scratch) / member
            if unpacked.returncode == 0 and is_arm64_image(image):
                shutil.copyfile(image, target)
                return target
    raise FileNotFoundError(f"no uncompressed arm64 Image for {release} in the archive")


def is_arm64_image(path: Path) -> bool:
    if not path.is_file():
        return False
    with path.open("rb") as stream:
        header = stream.read(0x40)
    return header[0x38:0x3C] == ARM64_IMAGE_MAGIC


def busybox(chroot: Chroot) -> Path:
    """busybox-static for arm64, from the suite's archive."""
    cache = chroot.path("/var/cache/apt/archives")
    debs = sorted(cache.glob("busybox-static_*_arm64.deb"))
    if not debs:
        chroot.run("cd /var/cache/apt/archives && apt-get download -q busybox-static:arm64")
        debs = sorted(cache.glob("busybox-static_*_arm64.deb"))
    target = cache.parent / "lab-images" / "busybox.arm64"
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        run(
            ["sh", "-c", f"dpkg-deb --fsys-tarfile '{debs[-1]}' | tar -x -C '{scratch}'"],
            failure=f"unpacking {debs[-1].name}",
        )
        found = next(
            path
            for path in Path(scratch).rglob("busybox")
            if path.is_file() and path.read_bytes()[:4] == b"\x7fELF"
        )
        shutil.copyfile(found, target)
    target.chmod(0o755)
    return target


def initramfs(
    directory: Path,
    busybox_binary: Path,
    module: Path,
    foreign_module: Path | None,
    cycles: int = CYCLES,
    acpi_tables: list[Path] = (),
    release: str = "",
    *,
    driver: Driver,
    dependencies: list[Path] = (),
) -> Path:
    """The guest's initrd: ACPI table upgrades first (an uncompressed cpio the kernel reads
    early, CONFIG_ACPI_TABLE_UPGRADE), then the busybox initramfs with the module, and the
    kernel's own modules it depends on."""
    root = directory / "initramfs"
    for sub in ("bin", "proc", "sys", "dev"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    shutil.copyfile(busybox_binary, root / "bin" / "busybox")
    (root / "bin" / "busybox").chmod(0o755)
    (root / "init").write_text(init_script(driver, cycles), encoding="utf-8")
    (root / "init").chmod(0o755)
    ko = f"{driver.module}.ko"
    shutil.copyfile(module, root / ko)
    (root / "lab-dependencies").write_text(
        " ".join(path.stem for path in dependencies) + "\n", encoding="utf-8"
    )
    if release:  # where modprobe finds it, with the alias index depmod writes
        installed = root / "lib" / "modules" / release / "updates" / "dkms"
        installed.mkdir(parents=True)
        shutil.copyfile(module, installed / ko)
        kernel_dir = root / "lib" / "modules" / release / "kernel"
        kernel_dir.mkdir(parents=True)
        for dependency in dependencies:
            shutil.copyfile(dependency, kernel_dir / dependency.name)
        run(["depmod", "-b", root, release], failure="depmod of the guest's modules")
    if foreign_module is not None:
        shutil.copyfile(foreign_module, root / "foreign.ko")
    archive = directory / "initramfs.cpio"
    cpio(root, archive)
    if not acpi_tables:
        return archive
    tables = directory / "acpi-tables"
    (tables / "kernel" / "firmware" / "acpi").mkdir(parents=True)
    for table in acpi_tables:
        shutil.copyfile(table, tables / "kernel" / "firmware" / "acpi" / table.name)
    combined = directory / "initrd-with-acpi.cpio"
    cpio(tables, combined)
    with combined.open("ab") as out:
        out.write(archive.read_bytes())
    return combined


def cpio(root: Path, archive: Path) -> None:
    """``root`` as a newc cpio archive, what the kernel unpacks as its initramfs."""
    run(
        ["sh", "-c", f"cd '{root}' && find . | cpio -o -H newc --quiet > '{archive}'"],
        failure=f"packing {archive.name}",
    )


UEFI_FIRMWARE = Path("/usr/share/qemu-efi-aarch64/QEMU_EFI.fd")


def _qemu_command(
    image: Path,
    initrd: Path | None,
    dtb: Path | None,
    extra: list[str],
    *,
    acpi: bool = False,
    kernel_arguments: str = "",
) -> list[str]:
    # An Oops panics and the panic ends QEMU (-no-reboot) instead of hanging the guest.
    # ``kernel_arguments`` come last: of a parameter given twice, the kernel keeps the last.
    append = "console=ttyAMA0 panic=-1 oops=panic loglevel=3 rdinit=/init"
    if kernel_arguments:
        append += f" {kernel_arguments}"
    firmware: list[str] = []
    if acpi:
        append += " acpi=force"
        firmware = ["-bios", str(UEFI_FIRMWARE)]
    command = [
        "qemu-system-aarch64",
        "-M",
        "virt",
        "-cpu",
        arm64_emulation.QEMU_CPU,
        "-smp",
        "2",
        "-m",
        "2048",
        "-nographic",
        "-no-reboot",
        "-nic",
        "none",
        *firmware,
        "-kernel",
        str(image),
        "-append",
        append,
    ]
    if initrd is not None:
        command += ["-initrd", str(initrd)]
    if dtb is not None:
        command += ["-dtb", str(dtb)]
    return command + extra


def device_tree(directory: Path, image: Path, driver: Driver) -> Path:
    """QEMU's own device tree for this machine, with the NPU node added."""
    dumped = directory / "virt.dtb"
    run(
        _qemu_command(image, None, None, ["-machine", f"dumpdtb={dumped}"]),
        failure="dumping QEMU's device tree",
    )
    dumped_source = run(
        ["dtc", "-I", "dtb", "-O", "dts", dumped], failure="reading QEMU's device tree"
    )
    source = dumped_source.stdout
    end = source.rstrip().rfind("};")
    patched = source[:end] + driver.device_tree_node + source[end:]
    compiled = directory / "virt-npu.dtb"
    run(
        ["dtc", "-I", "dts", "-O", "dtb", "-o", compiled, "-"],
        input_data=patched,
        failure="compiling the device tree with the NPU node",
    )
    return compiled


def boot(
    image: Path,
    module: Path,
    busybox_binary: Path,
    foreign_module: Path | None,
    release: str,
    *,
    cycles: int = CYCLES,
    acpi_table: Path | None = None,
    timeout: float = 600,
    driver: Driver,
    dependencies: list[Path] = (),
) -> BootResult:
    """Boot with QEMU's device tree plus the NPU node, or, given an SSDT, with UEFI
    firmware and ACPI (how the Orange Pi 6 Plus boots) plus that table."""
    require_tool("qemu-system-aarch64")
    require_tool("cpio")
    require_tool("depmod")
    with tempfile.TemporaryDirectory(prefix="lab-qemu-") as scratch:
        directory = Path(scratch)
        tables = [acpi_table] if acpi_table else []
        initrd = initramfs(
            directory,
            busybox_binary,
            module,
            foreign_module,
            cycles,
            tables,
            release,
            driver=driver,
            dependencies=dependencies,
        )
        if acpi_table is None:
            command = _qemu_command(image, initrd, device_tree(directory, image, driver), [])
        else:
            require_tool("iasl")
            command = _qemu_command(image, initrd, None, [], acpi=True)
        console, seconds = _run_guest(command, timeout)
        return BootResult(release, seconds, console, driver, cycles)


def boot_initrd(
    image: Path, initrd: Path, driver: Driver, directory: Path, timeout: float = 300
) -> BootResult:
    """Boot a ready initrd with QEMU's device tree plus the NPU node."""
    require_tool("qemu-system-aarch64")
    command = _qemu_command(image, initrd, device_tree(directory, image, driver), [])
    console, seconds = _run_guest(command, timeout)
    release = re.search(r"LAB: booted (\S+)", console)
    return BootResult(release[1] if release else "?", seconds, console, driver=driver)


def _run_guest(command: list[str], timeout: float) -> tuple[str, float]:
    """The guest's console and the seconds it ran; a guest past ``timeout`` is stopped."""
    started = time.monotonic()
    try:
        result = subprocess.run(
            command,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            check=False,
        )
        console = result.stdout + result.stderr
    except subprocess.TimeoutExpired as expired:
        console = (expired.stdout or b"").decode(errors="replace") + "\nLAB: timeout"
    return console, time.monotonic() - started


def kernel_module_dependencies(chroot: Chroot, release: str, module: Path) -> list[Path]:
    """The kernel's own modules ``module`` needs (modinfo's depends, recursively), from the
    suite's linux-modules (7.x) or linux-image (6.x) package, uncompressed."""
    wanted = _depends(module)
    if not wanted:
        return []
    tree = modules_tree(chroot, release)
    index = {path.name.split(".ko")[0].replace("-", "_"): path for path in tree.rglob("*.ko*")}
    found: dict[str, Path] = {}
    while wanted:
        name = wanted.pop().replace("-", "_")
        if name in found:
            continue
        if name not in index:
            raise FileNotFoundError(f"{release} has no module {name}")
        found[name] = _uncompressed(index[name], tree.parent / "uncompressed")
        wanted += _depends(found[name])
    # modprobe loads them in dependency order from modules.dep; the order here is only
    # the list the init script names.
    return list(found.values())


def _depends(module: Path) -> list[str]:
    result = run(["modinfo", "-F", "depends", module], failure=f"modinfo {module.name}")
    return [name for name in result.stdout.strip().split(",") if name]


def _uncompressed(path: Path, directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / (path.name.split(".ko")[0] + ".ko")
    if not target.exists():
        if path.name.endswith(".ko"):
            shutil.copyfile(path, target)
        else:
            tool = {".xz": "xz", ".zst": "zstd", ".gz": "gzip"}[path.suffix]
            with target.open("wb") as out:
                run([tool, "-dc", path], output=out, text=False, failure=f"unpacking {path.name}")
    return target


def modules_tree(chroot: Chroot, release: str) -> Path:
    """/lib/modules/<release>/kernel of the kernel's package, unpacked once per run."""
    cache = chroot.path("/var/cache/apt/archives")
    target = cache.parent / "lab-images" / f"{release}.modules"
    if (target / "kernel").is_dir():
        return target / "kernel"
    for package in (f"linux-modules-{release}", f"linux-image-{release}"):
        debs = sorted(cache.glob(f"{package}_*_arm64.deb"))
        if not debs:
            chroot.run(
                f"cd /var/cache/apt/archives && apt-get download -q {package}:arm64", check=False
            )
            debs = sorted(cache.glob(f"{package}_*_arm64.deb"))
        if not debs:
            continue
        with tempfile.TemporaryDirectory(dir=cache.parent) as scratch:
            run(
                [
                    "sh",
                    "-c",
                    f"dpkg-deb --fsys-tarfile '{debs[-1]}' | tar -x -C '{scratch}' "
                    "--wildcards '*/modules/*/kernel/*'",
                ],
                check=False,
                failure=f"unpacking {debs[-1].name}",
            )
            kernels = [
                path
                for path in (
                    Path(scratch) / prefix / release / "kernel"
                    for prefix in ("usr/lib/modules", "lib/modules")
                )
                if path.is_dir()
            ]
            if kernels:
                target.mkdir(parents=True, exist_ok=True)
                kernels[0].rename(target / "kernel")
                return target / "kernel"
    raise FileNotFoundError(f"no kernel modules for {release} in the archive")
