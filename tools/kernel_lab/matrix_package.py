"""The foreign-skip, old-kernel-skip, package-upgrade and purge columns: what apt does to
the package beside the kernels it serves."""

from __future__ import annotations

import re

from . import kernels, scenarios
from .chroot import Chroot
from .kernels import Kernel
from .matrix_cells import (
    OLDER_SUITE,
    Cell,
    Packages,
    Recorder,
)


class PackageColumns(Recorder):
    """The foreign-skip, old-kernel-skip, package-upgrade and purge columns: what apt does to
    the package beside the kernels it serves."""

    def _foreign(self, chroot: Chroot, builds: list[Packages]) -> list[Cell]:
        result = chroot.run("apt-get install -y -q linux-headers-amd64", check=False)
        self.log("foreign kernel: linux-headers-amd64", result.stdout + result.stderr)
        states = {
            build.name: [
                release
                for release in scenarios.dkms_status(chroot, build.driver.module)
                if release.endswith("-amd64")
            ]
            for build in builds
        }
        chroot.run(
            "apt-get purge -y -q 'linux-headers-*-amd64' linux-headers-amd64 || "
            "dpkg --purge --force-all $(dpkg-query -W -f='${Package} ' "
            "'linux-headers-*amd64*')",
            check=False,
        )
        return [
            Cell("ok", detail="apt exit 0, kernel skipped (BUILD_EXCLUSIVE)")
            if result.returncode == 0 and not states[build.name]
            else Cell(
                "failed", detail=f"apt exit {result.returncode}, dkms states {states[build.name]}"
            )
            for build in builds
        ]

    def _older_kernel(self, chroot: Chroot, builds: list[Packages]) -> list[Cell]:
        """An older suite's arm64 kernel (older than kernel.min) beside the current one."""
        older = kernels.install_older_suite_headers(chroot, OLDER_SUITE)
        self.log(f"older kernel: {older.headers} from {OLDER_SUITE}", older.output)
        states = {
            build.name: scenarios.dkms_status(chroot, build.driver.module).get(older.release)
            for build in builds
        }
        chroot.run(["apt-get", "purge", "-y", "-q", f"{older.headers}:arm64", *older.common])
        cells = []
        for build in builds:
            if build.kernel_regex and re.search(build.kernel_regex, older.release):
                cells.append(Cell("failed", detail=f"{older.release} is not older than kernel.min"))
            elif older.returncode == 0 and older.configured and states[build.name] is None:
                cells.append(
                    Cell(
                        "ok",
                        detail=f"apt exit 0, {older.release} from {OLDER_SUITE} skipped "
                        "(older than kernel.min)",
                    )
                )
            else:
                cells.append(
                    Cell(
                        "failed",
                        detail=f"apt exit {older.returncode}, headers "
                        + ("configured" if older.configured else "left half-configured")
                        + f", dkms state {states[build.name] or 'none'}",
                    )
                )
        return cells

    def _package_upgrade(self, chroot: Chroot, kept: tuple[Kernel, ...], build: Packages) -> Cell:
        step = scenarios.install_deb(chroot, build.next_deb)
        self.log(f"package upgrade of {build.name}", step.output)
        if not step.ok:
            return Cell("failed", detail=self._build_error(chroot, step.output, build))
        built = []
        for kernel in kept:
            cell = self._module_check(chroot, kernel, build, build.next_version)
            if cell.status not in ("ok", "excluded"):
                return cell
            if cell.status == "ok":
                built.append(kernel.release)
        module = build.driver.module
        old = [
            path
            for path in (
                f"/var/lib/dkms/{module}/{build.version}",
                f"/usr/src/{module}-{build.version}",
            )
            if chroot.path(path).exists()
        ]
        if old:
            return Cell("failed", detail=f"old version left behind: {old}")
        where = (
            f"rebuilt for {len(built)} of {len(kept)} kernels" if built else "no kernel in its gate"
        )
        return Cell("ok", detail=f"{build.next_version}: {where}")

    def _purge(self, chroot: Chroot, build: Packages) -> Cell:
        step = scenarios.purge(chroot, build.name)
        self.log(f"purge {build.name}", step.output)
        left = scenarios.leftovers(chroot, build.driver.module)
        if not step.ok or left:
            return Cell("failed", detail=f"apt exit {step.returncode}, left: {left}")
        module = build.driver.module
        return Cell("ok", detail=f"no {module}.ko, no /usr/src/{module}-*, no DKMS tree")
