"""The qemu, acpi and initramfs columns: the DKMS-built module booted in QEMU, with a device
tree, with ACPI descriptions, and from a real initramfs."""

from __future__ import annotations

from pathlib import Path

from . import acpi, initramfs, kernels, qemu
from .chroot import Chroot
from .kernels import Kernel
from .matrix_cells import (
    Cell,
    Packages,
    Recorder,
    Row,
    module_file,
)


class BootColumns(Recorder):
    """The qemu, acpi and initramfs columns: the DKMS-built module booted in QEMU, with a device
    tree, with ACPI descriptions, and from a real initramfs."""

    def _boots(
        self,
        chroot: Chroot,
        chosen: list[Kernel],
        rows: list[Row],
        modules: dict[str, Path | None],
        build: Packages,
    ) -> None:
        """A QEMU boot per ABI, and per page size (the 16k flavour); ACPI once."""
        booted: dict[tuple[str, bool], str] = {}
        acpi_booted: set[str] = set()
        built = [kernel for kernel in chosen if modules.get(kernel.release)]
        for kernel, row in zip(chosen, rows, strict=True):
            if not modules.get(kernel.release):
                for column in ("qemu", "acpi"):
                    row.cells[column] = Cell("n/a", detail="no module for this kernel")
                continue
            key = (kernels.abi(kernel.release), "16k" in kernels.flavour(kernel.release))
            if key in booted:
                row.cells["qemu"] = Cell("n/a", detail=f"same ABI and page size as {booted[key]}")
            else:
                booted[key] = kernel.release
                others = [other for other in built if other is not kernel]
                foreign = others[0] if others else None
                self.cell(
                    row,
                    "qemu",
                    lambda k=kernel, f=foreign: self._boot(chroot, k, modules, f, build),
                )
            if not build.driver.acpi:
                row.cells["acpi"] = Cell("n/a", detail="the SoC boots with a device tree")
            elif not self.plan.acpi:
                # The firmware parsing is the driver's own code: it is booted on the oldest
                # and the newest kernels of the run, the device-tree boots cover the rest.
                row.cells["acpi"] = Cell(
                    "n/a", detail="ACPI is booted in the oldest and the newest suite"
                )
            elif acpi_booted:
                # The firmware parsing is the driver's own code, not the kernel's: the
                # device-tree boot of each ABI covers the rest.
                row.cells["acpi"] = Cell(
                    "n/a", detail="ACPI is booted on this suite's first kernel"
                )
            else:
                acpi_booted.add(key[0])
                self.cell(row, "acpi", lambda k=kernel: self._boot_acpi(chroot, k, modules, build))

    def _initramfs(
        self, chroot: Chroot, chosen: list[Kernel], rows: list[Row], build: Packages
    ) -> None:
        """A package with an initramfs hook: its module loaded from a real initramfs of the
        first kernel it was built for (the hook's work is the same for every kernel)."""
        hooked = bool(build.driver.initramfs_hook)
        first = next(
            (
                (kernel, row)
                for kernel, row in zip(chosen, rows, strict=True)
                if module_file(chroot, kernel, build)
            ),
            None,
        )
        for kernel, row in zip(chosen, rows, strict=True):
            if not hooked:
                row.cells["initramfs"] = Cell("n/a", detail="no initramfs hook: udev loads it")
            elif first is None or kernel is not first[0]:
                row.cells["initramfs"] = Cell(
                    "n/a",
                    detail="no module for this kernel"
                    if first is None
                    else f"booted from the initramfs of {first[0].release}",
                )
        if hooked and first is not None:
            self.cell(first[1], "initramfs", lambda: self._initramfs_boot(chroot, first[0], build))

    def _initramfs_boot(self, chroot: Chroot, kernel: Kernel, build: Packages) -> Cell:
        result = initramfs.boot_from_initramfs(chroot, kernel.release, build.driver, self.log)
        problems = result.problems(build.driver)
        if problems:
            return Cell("failed", detail="; ".join(problems[:3]))
        return Cell(
            "ok",
            detail=f"mkinitramfs with the package's hook: {build.driver.module} in conf/modules, "
            "loaded by initramfs-tools' load_modules before any root file system, probe ran; "
            "without the hook it does not load",
        )

    def _boot(
        self,
        chroot: Chroot,
        kernel: Kernel,
        modules: dict[str, Path | None],
        foreign: Kernel | None,
        build: Packages,
    ) -> Cell:
        module = modules.get(kernel.release)
        if module is None:
            return Cell("skipped", detail="no module was built for this kernel")
        foreign_module = modules.get(foreign.release) if foreign else None
        image = qemu.kernel_image(chroot, kernel.release)
        dependencies = qemu.kernel_module_dependencies(chroot, kernel.release, module)
        result = qemu.boot(
            image,
            module,
            qemu.busybox(chroot),
            foreign_module,
            kernel.release,
            driver=build.driver,
            dependencies=dependencies,
        )
        self.log(f"qemu {build.name} {kernel.release}", result.console)
        problems = result.problems(expect_foreign_refusal=foreign_module is not None)
        if problems:
            return Cell("failed", detail="; ".join(problems[:3]))
        needs = f" (with {len(dependencies)} kernel modules it needs)" if dependencies else ""
        return Cell(
            "ok",
            detail=f"loaded by modalias{needs}, insmod, probe, rmmod, {qemu.CYCLES} cycles, "
            + (
                f"the module built for {foreign.release} refused, "
                if foreign and foreign_module
                else "no foreign module offered, "
            )
            + "no kernel fault",
        )

    def _boot_acpi(
        self, chroot: Chroot, kernel: Kernel, modules: dict[str, Path | None], build: Packages
    ) -> Cell:
        """UEFI + ACPI boots with each SSDT variant: complete or with one part missing."""
        module = modules.get(kernel.release)
        if module is None:
            return Cell("skipped", detail="no module was built for this kernel")
        image = qemu.kernel_image(chroot, kernel.release)
        busybox = qemu.busybox(chroot)
        parts: dict[str, str] = {}
        failures = []
        boots = build.driver.acpi
        assert boots is not None  # the column runs only for drivers that describe ACPI boots
        with acpi.scratch_directory() as scratch:
            for variant in boots.variants:
                table = acpi.compile_table(
                    boots.table, variant, build.driver.package, Path(scratch)
                )
                result = qemu.boot(
                    image,
                    module,
                    busybox,
                    None,
                    kernel.release,
                    cycles=3,
                    acpi_table=table,
                    timeout=300,
                    driver=build.driver,
                )
                self.log(f"acpi {variant.name} {kernel.release}", result.console)
                problems = acpi.problems(variant, result)
                lines = [line for line in acpi.probe_lines(result) if variant.expect in line]
                parts[variant.name] = (
                    "; ".join(problems)
                    if problems
                    else ("ok: " + (lines[0].split("] ", 1)[-1] if lines else variant.expect))
                )
                if problems:
                    failures.append(f"{variant.name}: {problems[0]}")
        if failures:
            return Cell("failed", detail="; ".join(failures[:2]), parts=parts)
        return Cell(
            "ok",
            detail=f"{len(parts)} ACPI descriptions, each as the kernel log must show: "
            + ", ".join(variant.title for variant in boots.variants[:2])
            + (", ..." if len(boots.variants) > 2 else ""),
            parts=parts,
        )
