"""The build, autoinstall and warnings columns, on Debian's kernels and the simulated
distribution kernels: DKMS built the module where the gate lets it, and skipped it cleanly
where not."""

from __future__ import annotations

import re
import time

from . import distribution_kernels, kernels, scenarios
from .chroot import Chroot
from .kernels import Kernel
from .matrix_cells import (
    Cell,
    Packages,
    Recorder,
    Row,
    one_line,
)


class BuildColumns(Recorder):
    """The build, autoinstall and warnings columns, on Debian's kernels and the simulated
    distribution kernels: DKMS built the module where the gate lets it, and skipped it cleanly
    where not."""

    def _warnings(self, chroot: Chroot, kernel: Kernel, build: Packages, row: Row) -> None:
        misses = self._gate_misses(chroot, kernel, build)
        if misses:
            row.cells["warnings"] = Cell("n/a", detail=f"outside the gate: {misses[0]}")
            return
        log = scenarios.dkms_build_log(chroot, build.driver.module, kernel.release)
        if row.role == "installed" or log is None:
            # The suite's first kernel, and any kernel DKMS could not build, get a real
            # -Werror build: the proof for the first, the first error for the other.
            self.cell(row, "warnings", lambda: self._werror(chroot, kernel, build))
        else:
            # The other flavours: DKMS's own build of them, just done, already printed
            # every warning a -Werror build would have turned into an error.
            self.cell(row, "warnings", lambda: self._logged_warnings(log))

    def _gate_misses(self, chroot: Chroot, kernel: Kernel, build: Packages) -> list[str]:
        if not kernels.has_headers(chroot, kernel.release):
            kernels.install(chroot, kernel, target_release=self.suite.target_release)
        return kernels.gate_misses(chroot, kernel.release, build.gate, build.kernel_regex)

    def _distribution_kernel(
        self,
        chroot: Chroot,
        base: Kernel,
        distribution: distribution_kernels.DistributionKernel,
        installed: dict[str, bool],
    ) -> None:
        """A simulated distribution kernel: its headers installed with apt, then each
        package's verdict (built, devfreq or not, or skipped for the expected reasons)."""
        started = time.monotonic()
        result = distribution_kernels.install(chroot, base, distribution)
        spent = round(time.monotonic() - started, 1)
        self.log(f"simulated kernel {result.kernel.release} ({distribution.name})", result.output)
        for build in self.builds:
            row = Row(
                self.suite.name,
                result.kernel.release,
                f"simulated: {distribution.distribution}",
                build.name,
            )
            self.rows.append(row)
            row.cells["autoinstall"] = Cell(
                "ok" if result.returncode == 0 and result.configured else "failed",
                spent,
                f"apt exit {result.returncode}, headers "
                + ("configured" if result.configured else "left half-configured"),
            )
            if not installed[build.name]:
                row.cells["build"] = Cell("skipped", detail="package install failed")
                continue
            expected = build.driver.distribution_kernels.get(distribution.name)
            if expected is None:
                row.cells["build"] = Cell(
                    "failed",
                    detail=f"dkms/{build.name}.yaml says nothing of this kernel: add "
                    f"lab.distribution_kernels.{distribution.name}",
                )
                continue
            cell = self.cell(
                row,
                "build",
                lambda b=build, e=expected: self._expected_verdict(chroot, result.kernel, b, e),
            )
            if cell.status == "ok":
                self._warnings(chroot, result.kernel, build, row)
            else:
                row.cells["warnings"] = Cell("n/a", detail="nothing built")
            for column in ("foreign-skip", "old-kernel-skip", "package-upgrade", "purge"):
                row.cells[column] = Cell("n/a", detail="checked on the installed row")
            for column in ("qemu", "acpi", "initramfs"):
                row.cells[column] = Cell("n/a", detail="simulated kernel: headers only, no image")
        self.log(f"remove {result.kernel.headers}", distribution_kernels.remove(chroot, result))

    def _expected_verdict(
        self, chroot: Chroot, kernel: Kernel, build: Packages, expected: str | tuple[str, ...]
    ) -> Cell:
        compiled_in = (
            frozenset(expected.removeprefix("build with ").split())
            if isinstance(expected, str) and expected.startswith("build with ")
            else frozenset()
        )
        cell = self._module_check(chroot, kernel, build, build.version, compiled_in)
        if isinstance(expected, str):
            if cell.status != "ok":
                return Cell("failed", detail=f"expected {expected}, got: {cell.detail}")
            return cell
        if cell.status != "excluded":
            return Cell("failed", detail=f"expected a skip ({'; '.join(expected)}): {cell.detail}")
        missing = [reason for reason in expected if reason not in cell.detail]
        if missing:
            return Cell("failed", detail=f"skipped, but not because {missing[0]}: {cell.detail}")
        return cell

    def _install(self, chroot: Chroot, kernel: Kernel, build: Packages) -> Cell:
        step = scenarios.install_deb(chroot, build.deb)
        self.log(f"install {build.name}", step.output)
        if not step.ok:
            return Cell("failed", detail=self._build_error(chroot, step.output, build))
        return self._module_check(chroot, kernel, build, build.version)

    def _module_check(
        self,
        chroot: Chroot,
        kernel: Kernel,
        build: Packages,
        version: str,
        compiled_in: frozenset[str] = frozenset(),
    ) -> Cell:
        """Built and installed where the kernel is inside the package's gate; cleanly
        skipped (no module, no failed DKMS state) where it is not. Of the driver's optional
        code (lab.optional_code), exactly what ``compiled_in`` names is built in: the module
        imports its symbols, and only those."""
        module = build.driver.module
        state = scenarios.dkms_status(chroot, module).get(kernel.release)
        modules = scenarios.installed_modules(chroot, kernel, module)
        misses = self._gate_misses(chroot, kernel, build)
        if misses:
            if state is None and not modules:
                return Cell("excluded", detail=f"skipped, as the gate says: {', '.join(misses)}")
            return Cell("failed", detail=f"outside the gate ({misses[0]}) but dkms says {state}")
        if state != "installed":
            return Cell(
                "failed",
                detail=f"dkms status for {kernel.release}: {state}; "
                + self._build_error(chroot, "", build),
            )
        if len(modules) != 1:
            return Cell("failed", detail=f"expected one {module}.ko, found {modules}")
        info = scenarios.modinfo(chroot, modules[0])
        if info.get("version") != version:
            return Cell("failed", detail=f"modinfo version {info.get('version')} != {version}")
        if info.get("vermagic", "").split(" ")[0] != kernel.release:
            return Cell("failed", detail=f"vermagic {info.get('vermagic')}")
        optional = ""
        if build.driver.optional_code:
            imported = distribution_kernels.imported_symbols(chroot, modules[0])
            for name, symbols in sorted(build.driver.optional_code.items()):
                calls = any(symbol in imported for symbol in symbols)
                if calls != (name in compiled_in):
                    return Cell(
                        "failed",
                        detail=f"{name} compiled "
                        + (
                            "in, on a kernel that does not export"
                            if calls
                            else "out, on one that exports"
                        )
                        + f" {', '.join(symbols)}",
                    )
                optional += f", {name} " + (f"on (calls {symbols[0]})" if calls else "off")
        gated = self._layout_gated(chroot, kernel, build, modules[0])
        if gated.startswith("failed: "):
            return Cell("failed", detail=gated.removeprefix("failed: "))
        return Cell("ok", detail=f"{modules[0]} version {version}{optional}{gated}")

    def _layout_gated(self, chroot: Chroot, kernel: Kernel, build: Packages, module: str) -> str:
        """Of the code built only where the kernel's headers have its layout
        (lab.layout_gated_code): in exactly where the header lacks the text that leaves it
        out. ', <name> on|off (...)' for each, or 'failed: <why>'."""
        if not build.driver.layout_gated_code:
            return ""
        imported = distribution_kernels.imported_symbols(chroot, module)
        trees = [
            f"/usr/src/linux-headers-{kernel.release}",
            *(f"/usr/src/{c}" for c in kernel.common),
        ]
        found = ""
        for name, (symbols, header, absent_when) in sorted(build.driver.layout_gated_code.items()):
            texts = [chroot.path(f"{tree}/{header}") for tree in trees]
            text = next(
                (path.read_text(errors="replace") for path in texts if path.is_file()), None
            )
            if text is None:
                return f"failed: no {header} in {kernel.release}'s headers"
            wanted = absent_when not in text
            built = any(symbol in imported for symbol in symbols)
            layout = f"{header} {'lacks' if wanted else 'has'} '{absent_when}'"
            if built != wanted:
                return f"failed: {name} {'in' if built else 'out'}, but {layout}"
            found += f", {name} {'on' if built else 'off'} ({layout})"
        return found

    def _build_error(self, chroot: Chroot, output: str, build: Packages) -> str:
        logs = sorted(chroot.path(f"/var/lib/dkms/{build.driver.module}").rglob("make.log"))
        for log in logs:
            for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
                if re.search(r"\berror\b", line):
                    return one_line(line)
        lines = [line for line in output.splitlines() if re.search(r"error|Error", line)]
        return one_line(lines[0]) if lines else "see the log"

    def _autoinstalled(self, chroot: Chroot, kernel: Kernel, build: Packages, output: str) -> Cell:
        cell = self._module_check(chroot, kernel, build, build.version)
        if cell.status == "ok" and build.driver.module not in output:
            return Cell("failed", detail="module present but the headers' hook did not build")
        return cell

    def _logged_warnings(self, log: str) -> Cell:
        facts = scenarios.build_diagnostics(log)
        count = int(facts["warnings"])
        if count:
            return Cell("failed", detail=f"{count} warnings: {facts['first_warning']}")
        return Cell("ok", detail="0 compiler and 0 modpost warnings in DKMS's build log")

    def _werror(self, chroot: Chroot, kernel: Kernel, build: Packages) -> Cell:
        step = scenarios.werror_build(chroot, kernel, build.patched_tree)
        self.log(f"-Werror build of {build.name} for {kernel.release}", step.output)
        if not step.ok:
            return Cell("failed", detail=step.facts.get("first_error", "build failed"))
        count = int(step.facts["warnings"])
        if count:
            return Cell("failed", detail=f"{count} warnings: {step.facts['first_warning']}")
        return Cell("ok", detail="0 warnings (KCFLAGS=-Werror), 0 modpost warnings")
