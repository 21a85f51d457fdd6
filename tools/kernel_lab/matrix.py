"""The kernel matrix: for each Debian suite, the package's whole life cycle on real kernels.

Per suite, in a fresh chroot: install the package (DKMS builds for the installed kernel),
install the headers of every other arm64 flavour the suite carries (the automatic rebuild
of a kernel upgrade, once per flavour), install amd64 headers and an older suite's arm64
headers (kernels the package must skip while apt succeeds), upgrade the package, boot one
kernel per ABI (and the 16k-page flavour) in QEMU with the DKMS-built module, build the
patched tree with -Werror for every kernel, purge. Every step is timed and recorded; a
failure is a failed row with the first error, never a silent pass.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from pipeline.config import load_package

from . import acpi, distribution_kernels, initramfs, kernels, qemu, scenarios
from .chroot import Chroot, Suite, create_chroot
from .drivers import AIPU, Driver
from .kernels import Kernel

# A suite whose arm64 kernels are older than kernel.min: its headers sit next to every
# suite's own, as an old vendor or previous-release kernel does on a board.
OLDER_SUITE = "bullseye"
# Relative run time of the suites (backports has two ABIs), for scheduling only.
SUITE_WEIGHT = {"trixie-backports": 3, "trixie": 2, "sid": 2}

COLUMNS = (
    "build",
    "autoinstall",
    "foreign-skip",
    "old-kernel-skip",
    "package-upgrade",
    "purge",
    "qemu",
    "acpi",
    "initramfs",
    "warnings",
)
SCHEMA_VERSION = 4


@dataclass
class Cell:
    # ok | failed | skipped | known-issue | n/a | excluded (outside the package's kernel
    # gate and skipped cleanly, as it must be)
    status: str
    seconds: float = 0.0
    detail: str = ""
    parts: dict[str, str] = field(default_factory=dict)  # e.g. one result per ACPI variant


@dataclass
class Row:
    suite: str
    kernel: str
    role: str  # installed | upgrade (installed later; its headers' hook builds)
    package: str = "aipu-dkms"
    cells: dict[str, Cell] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(
            cell.status in ("ok", "n/a", "known-issue", "excluded") for cell in self.cells.values()
        )


@dataclass(frozen=True)
class Packages:
    """One driver package under test: version N, version N+1 and its patched tree."""

    deb: Path
    version: str
    next_deb: Path
    next_version: str
    patched_tree: Path
    driver: Driver = AIPU
    gate: tuple[str, ...] = ("CONFIG_ARM64",)  # dkms.conf's BUILD_EXCLUSIVE_CONFIG
    kernel_regex: str = ""  # dkms.conf's BUILD_EXCLUSIVE_KERNEL
    board_files: tuple[str, ...] = ()  # installed paths of the package's board files

    @property
    def name(self) -> str:
        return self.driver.package


@dataclass(frozen=True)
class Plan:
    """Which kernels of a suite are tested: the installed one, then every flavour."""

    suite: Suite
    first: str  # "meta" (current ABI) or "previous" (the ABI before it, so the next is new)
    # Run only when the suite's arm64 headers are newer than this archive's (experimental).
    newer_than: str | None = None
    # Flavours to test (arm64, cloud-arm64, ...); None: every one the suite carries.
    flavours: tuple[str, ...] | None = None
    # Headers packages by name: when given, only these (those the suite carries) are tested.
    kernels: tuple[str, ...] = ()
    # Whether the ACPI boot runs here (run_matrix: in the oldest and the newest suite).
    acpi: bool = True


class SuiteRun:
    """One suite's chroot: every driver package through the life cycle on every kernel."""

    def __init__(
        self,
        plan: Plan,
        packages: Packages | list[Packages],
        workdir: Path,
        log: Path,
        distributions: list[distribution_kernels.DistributionKernel] | None = None,
    ) -> None:
        self.plan = plan
        # The simulated distribution kernels derived here; by default those based on the suite.
        self.distributions = (
            distribution_kernels.for_suite(plan.suite.name)
            if distributions is None
            else distributions
        )
        self.suite = plan.suite
        self.builds = packages if isinstance(packages, list) else [packages]
        self.packages = self.builds[0]
        self.workdir = workdir
        self.log_path = log
        self.rows: list[Row] = []
        self.notes: list[str] = []
        self.dkms_version = ""
        self.skipped = ""  # why the suite has nothing to test, when it has not

    # -- recording ---------------------------------------------------------------------
    def log(self, title: str, text: str) -> None:
        with self.log_path.open("a", encoding="utf-8") as stream:
            stream.write(f"\n===== {title}\n{text}\n")

    def cell(self, row: Row, column: str, action: Callable[[], Cell]) -> Cell:
        started = time.monotonic()
        try:
            result = action()
        except Exception as error:  # a step's crash is that step's failure, not the run's
            output = getattr(getattr(error, "result", None), "stdout", "") or ""
            self.log(f"{row.kernel} {column} raised", traceback.format_exc() + output)
            result = Cell("failed", detail=_one_line(str(error)))
        result.seconds = round(time.monotonic() - started, 1)
        row.cells[column] = result
        return result

    # -- the life cycle ----------------------------------------------------------------
    def run(self) -> list[Row]:
        self.log_path.write_text(f"kernel matrix log for {self.suite.name}\n", encoding="utf-8")
        chroot = create_chroot(self.suite, self.workdir)
        try:
            with chroot.mounted():
                self._run_in(chroot)
        finally:
            chroot.remove()
        return self.rows

    def _run_in(self, chroot: Chroot) -> None:
        chroot.refresh_lists()
        release = self.suite.target_release
        self.dkms_version = chroot.run("dkms --version").stdout.strip().split("-")[-1]
        chosen = self._choose_kernels(chroot)
        if not chosen:
            return
        first, *others = chosen
        rows = {
            (build.name, kernel.release): Row(
                self.suite.name,
                kernel.release,
                "installed" if kernel is first else "upgrade",
                build.name,
            )
            for build in self.builds
            for kernel in chosen
        }
        self.rows += list(rows.values())
        self.log(
            "install headers " + first.headers,
            kernels.install(chroot, first, target_release=release),
        )

        installed: dict[str, bool] = {}
        for build in self.builds:
            row = rows[build.name, first.release]
            cell = self.cell(row, "build", lambda b=build: self._install(chroot, first, b))
            installed[build.name] = cell.status in ("ok", "excluded")
            self._warnings(chroot, first, build, row)
            row.cells["autoinstall"] = Cell("n/a")
        for kernel in others:
            output, spent = "", 0.0
            if any(installed.values()):
                started = time.monotonic()
                output = kernels.install(chroot, kernel, target_release=release)
                self.log("kernel upgrade: install headers " + kernel.headers, output)
                spent = round(time.monotonic() - started, 1)
            for build in self.builds:
                row = rows[build.name, kernel.release]
                if installed[build.name]:
                    auto = self.cell(
                        row,
                        "autoinstall",
                        lambda k=kernel, b=build, o=output: self._autoinstalled(chroot, k, b, o),
                    )
                    auto.seconds = round(auto.seconds + spent, 1)
                    # A skip or failure says why in the build cell too, not only beside it.
                    why = "" if auto.status == "ok" else f": {auto.detail}"
                    row.cells["build"] = Cell(auto.status, 0.0, "by the autoinstall" + why)
                else:
                    for column in ("build", "autoinstall"):
                        row.cells[column] = Cell("skipped", detail="package install failed")
                self._warnings(chroot, kernel, build, row)
        if not installed[self.packages.name]:
            return

        for build in self.builds:
            if installed[build.name]:
                modules = {k.release: _module_file(chroot, k, build) for k in chosen}
                self._boots(
                    chroot, chosen, [rows[build.name, k.release] for k in chosen], modules, build
                )
        for build in self.builds:
            self._initramfs(chroot, chosen, [rows[build.name, k.release] for k in chosen], build)
        # Derived from the suite's current ABI (in backports the row after the installed one).
        current = others[0] if self.plan.first == "previous" and others else first
        for distribution in self.distributions:
            self._distribution_kernel(chroot, current, distribution, installed)
        kept = (first, *others[:1])
        for kernel in others[1:]:
            # Only two kernels go on to the package upgrade: it rebuilds for each one.
            self.log(f"remove headers {kernel.headers}", _remove_headers(chroot, kernel))

        present = [build for build in self.builds if installed[build.name]]
        first_rows = [rows[build.name, first.release] for build in present]
        self._each(first_rows, "foreign-skip", lambda: self._foreign(chroot, present))
        self._each(first_rows, "old-kernel-skip", lambda: self._older_kernel(chroot, present))
        for build, row in zip(present, first_rows, strict=True):
            self.cell(
                row, "package-upgrade", lambda b=build: self._package_upgrade(chroot, kept, b)
            )
        for build, row in zip(present, first_rows, strict=True):
            self.cell(row, "purge", lambda b=build: self._purge(chroot, b))
        for row in rows.values():
            if row.role != "installed":
                for column in ("foreign-skip", "old-kernel-skip", "package-upgrade", "purge"):
                    row.cells[column] = Cell("n/a", detail="checked on the installed row")

    def _each(self, rows: list[Row], column: str, action: Callable[[], list[Cell]]) -> None:
        """One step shared by every package (one apt run): a cell for each package's row."""
        started = time.monotonic()
        try:
            cells = action()
        except Exception as error:
            self.log(f"{column} raised", traceback.format_exc())
            cells = [Cell("failed", detail=_one_line(str(error))) for _ in rows]
        for row, cell in zip(rows, cells, strict=True):
            cell.seconds = round(time.monotonic() - started, 1)
            row.cells[column] = cell

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
                self.cell(row, "acpi", lambda k=kernel: self._boot_acpi(chroot, k, modules))

    def _choose_kernels(self, chroot: Chroot) -> list[Kernel]:
        """The installed kernel first, then the others; empty when the suite has none to test."""
        release = self.suite.target_release
        if self.plan.kernels:
            names = [
                name
                for name in self.plan.kernels
                if self.suite.archives & set(kernels.archive_versions(chroot, name))
            ]
            if not names:
                self.skipped = "carries none of the kernels asked for"
            return [kernels.resolve(chroot, name, target_release=release) for name in names]
        meta = kernels.resolve(chroot, target_release=release)
        if self.plan.newer_than:
            versions = kernels.archive_versions(chroot, "linux-headers-arm64")
            ours, theirs = versions.get(release or ""), versions.get(self.plan.newer_than)
            if ours is None or (theirs is not None and not kernels.newer(chroot, ours, theirs)):
                self.skipped = (
                    f"its arm64 headers ({ours or 'none'}) are not newer than "
                    f"{self.plan.newer_than}'s ({theirs})"
                )
                return []
        first = meta
        if self.plan.first == "previous":
            first = kernels.resolve(
                chroot, kernels.previous_abi(chroot, meta, release), target_release=release
            )
        others: list[Kernel] = []
        for metapackage in kernels.flavours(chroot):
            flavour = metapackage.removeprefix("linux-headers-")
            if self.plan.flavours is not None and flavour not in self.plan.flavours:
                continue
            kernel = kernels.resolve(chroot, metapackage, target_release=release)
            if kernel.release != first.release and kernel not in others:
                others.append(kernel)
        # The first flavour's own next kernel leads: it stays for the package upgrade.
        others.sort(key=lambda kernel: (kernels.flavour(kernel.release) != "arm64", kernel.release))
        return [first, *others]

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
            expected = distribution.expect[build.name]
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

    def _initramfs(
        self, chroot: Chroot, chosen: list[Kernel], rows: list[Row], build: Packages
    ) -> None:
        """A package with an initramfs hook: its module loaded from a real initramfs of the
        first kernel it was built for (the hook's work is the same for every kernel)."""
        hooked = any(
            path.startswith("/usr/share/initramfs-tools/hooks/") for path in build.board_files
        )
        first = next(
            (
                (kernel, row)
                for kernel, row in zip(chosen, rows, strict=True)
                if _module_file(chroot, kernel, build)
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

    def _expected_verdict(
        self, chroot: Chroot, kernel: Kernel, build: Packages, expected: str | list[str]
    ) -> Cell:
        devfreq = expected == "build-devfreq"
        cell = self._module_check(chroot, kernel, build, build.version, devfreq=devfreq)
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

    # -- steps -------------------------------------------------------------------------
    def _install(self, chroot: Chroot, kernel: Kernel, build: Packages) -> Cell:
        step = scenarios.install_deb(chroot, build.deb)
        self.log(f"install {build.name}", step.output)
        if not step.ok:
            return Cell("failed", detail=self._build_error(chroot, step.output, build))
        return self._module_check(chroot, kernel, build, build.version)

    def _module_check(
        self, chroot: Chroot, kernel: Kernel, build: Packages, version: str, devfreq: bool = False
    ) -> Cell:
        """Built and installed where the kernel is inside the package's gate; cleanly
        skipped (no module, no failed DKMS state) where it is not. The aipu module calls
        CIX's SCMI helpers (its devfreq code) only where ``devfreq`` says the kernel has them."""
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
        scaling = ""
        if build.driver == AIPU:  # its devfreq code follows the kernel
            calls = distribution_kernels.imports_cix_scmi(chroot, modules[0])
            if calls != devfreq:
                return Cell(
                    "failed",
                    detail="devfreq compiled "
                    + ("in, on a kernel without CIX's SCMI helpers" if calls else "out")
                    + ("" if calls else ", on a kernel with CIX's SCMI helpers"),
                )
            scaling = ", devfreq " + ("on (calls CIX's SCMI helpers)" if calls else "off")
        return Cell("ok", detail=f"{modules[0]} version {version}{scaling}")

    def _build_error(self, chroot: Chroot, output: str, build: Packages) -> str:
        logs = sorted(chroot.path(f"/var/lib/dkms/{build.driver.module}").rglob("make.log"))
        for log in logs:
            for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
                if re.search(r"\berror\b", line):
                    return _one_line(line)
        lines = [line for line in output.splitlines() if re.search(r"error|Error", line)]
        return _one_line(lines[0]) if lines else "see the log"

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

    def _boot_acpi(self, chroot: Chroot, kernel: Kernel, modules: dict[str, Path | None]) -> Cell:
        """UEFI + ACPI boots with each SSDT variant: complete or with one part missing."""
        module = modules.get(kernel.release)
        if module is None:
            return Cell("skipped", detail="no module was built for this kernel")
        image = qemu.kernel_image(chroot, kernel.release)
        busybox = qemu.busybox(chroot)
        parts: dict[str, str] = {}
        failures = []
        with acpi.scratch_directory() as scratch:
            for variant in acpi.VARIANTS:
                table = acpi.compile_table(variant, Path(scratch))
                result = qemu.boot(
                    image,
                    module,
                    busybox,
                    None,
                    kernel.release,
                    cycles=3,
                    acpi_table=table,
                    timeout=300,
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
            detail=f"{len(parts)} ACPI descriptions: incomplete ones fail "
            "cleanly, the complete one probes to the version check",
            parts=parts,
        )

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


def _remove_headers(chroot: Chroot, kernel: Kernel) -> str:
    result = chroot.run(
        f"apt-get purge -y -q --allow-change-held-packages {kernel.headers}:arm64", check=False
    )
    return result.stdout + result.stderr


def _module_file(chroot: Chroot, kernel: Kernel, build: Packages) -> Path | None:
    modules = scenarios.installed_modules(chroot, kernel, build.driver.module)
    if not modules:
        return None
    # Copied out: the package upgrade and purge steps replace or remove it.
    keep = chroot.root.parent / f"{kernel.release}.{build.driver.module}.ko"
    keep.write_bytes(chroot.path(modules[0]).read_bytes())
    return keep


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version)[:3])


def _one_line(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= 300 else line[:297] + "..."


def run_matrix(
    plans: list[Plan],
    builds: list[Packages],
    workdir: Path,
    jobs: int = 2,
    kernels_asked: tuple[str, ...] = (),
) -> dict:
    """Run every suite (``jobs`` at a time) and return the report."""
    workdir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    plans = with_acpi_at_the_ends(plans)
    runs = [
        SuiteRun(plan, builds, workdir / plan.suite.name, workdir / f"{plan.suite.name}.log")
        for plan in plans
    ]

    def execute(run: SuiteRun) -> tuple[SuiteRun, float, str]:
        begun = time.monotonic()
        error = ""
        try:
            run.run()
        except Exception as exception:
            error = _one_line(str(exception))
            run.log("suite failed", traceback.format_exc())
        return run, time.monotonic() - begun, error

    # The suites with the most kernels first, so the last one to start is a short one.
    order = sorted(runs, key=lambda run: SUITE_WEIGHT.get(run.suite.name, 1), reverse=True)
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        finished = {id(outcome[0]): outcome for outcome in pool.map(execute, order)}
    outcomes = [finished[id(run)] for run in runs]
    tested = {f"linux-headers-{row.kernel}" for run in runs for row in run.rows}
    return {
        "schema": SCHEMA_VERSION,
        "generated": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "seconds": round(time.monotonic() - started, 1),
        "packages": {
            build.name: {"version": build.version, "next_version": build.next_version}
            for build in builds
        },
        "columns": list(COLUMNS),
        "suites": [
            {
                "suite": run.suite.name,
                "dkms": run.dkms_version,
                "seconds": round(seconds, 1),
                "error": error,
                "skipped": run.skipped,
                "log": str(run.log_path),
            }
            for run, seconds, error in outcomes
        ],
        "rows": [
            {
                "suite": row.suite,
                "package": row.package,
                "kernel": row.kernel,
                "role": row.role,
                "ok": row.ok,
                "cells": {column: asdict(cell) for column, cell in row.cells.items()},
            }
            for run, _, _ in outcomes
            for row in run.rows
        ],
        "untested_kernels": [name for name in kernels_asked if name not in tested],
    }


def with_acpi_at_the_ends(plans: list[Plan]) -> list[Plan]:
    """ACPI boots in the first suite and in the last that always runs (plans come oldest
    first; experimental runs only when it is newer than sid, so sid is the newest sure)."""
    sure = [plan for plan in plans if plan.newer_than is None] or plans
    ends = {plans[0].suite.name, sure[-1].suite.name} if plans else set()
    return [replace(plan, acpi=plan.suite.name in ends) for plan in plans]


def report_ok(report: dict) -> bool:
    return (
        all(row["ok"] for row in report["rows"])
        and not any(suite["error"] for suite in report["suites"])
        and not report.get("untested_kernels")
        and bool(report["rows"])
    )


def format_table(report: dict) -> str:
    symbol = {
        "ok": "ok",
        "failed": "FAIL",
        "skipped": "skip",
        "known-issue": "known",
        "n/a": "-",
        "excluded": "excl",
    }
    header = ["suite", "package", "kernel", *report["columns"]]
    lines = []
    for row in report["rows"]:
        cells = []
        for column in report["columns"]:
            cell = row["cells"].get(column)
            if cell is None:
                cells.append("?")
            elif cell["status"] == "n/a":
                cells.append("-")
            else:
                cells.append(f"{symbol[cell['status']]} {cell['seconds']:.0f}s")
        lines.append([row["suite"], row.get("package", "aipu-dkms"), row["kernel"], *cells])
    widths = [max(len(str(line[i])) for line in [header, *lines]) for i in range(len(header))]
    out = [
        "  ".join(str(value).ljust(width) for value, width in zip(line, widths, strict=True))
        for line in [header, *lines]
    ]
    failures = [
        f"  {row.get('package', 'aipu-dkms')} {row['kernel']} {column}: {cell['detail']}"
        for row in report["rows"]
        for column, cell in row["cells"].items()
        if cell["status"] in ("failed", "known-issue", "skipped")
    ]
    suite_errors = [
        f"  {suite['suite']}: {suite['error']} (log: {suite['log']})"
        for suite in report["suites"]
        if suite["error"]
    ]
    skipped = [
        f"  {suite['suite']}: not tested, {suite['skipped']}"
        for suite in report["suites"]
        if suite.get("skipped")
    ]
    unknown = [
        f"  {name}: no suite of this run carries it (SUITES= names the suites)"
        for name in report.get("untested_kernels", [])
    ]
    notes = failures + suite_errors + skipped + unknown + untested_range(report)
    out.append(
        f"total {report['seconds']:.0f}s; "
        + ", ".join(
            f"{suite['suite']} {suite['seconds']:.0f}s (dkms {suite['dkms'] or '?'})"
            for suite in report["suites"]
        )
    )
    if notes:
        out += ["notes:", *notes]
    return "\n".join(out)


def untested_range(report: dict) -> list[str]:
    """Kernels a package was built for that are newer than its kernel.tested_max: the
    package description must not claim them until a matrix has proven them."""
    notes = []
    for package in sorted({row.get("package", "aipu-dkms") for row in report["rows"]}):
        tested_max = _version_tuple(load_package(package).kernel_tested_max)
        newer = sorted(
            {
                row["kernel"]
                for row in report["rows"]
                if row.get("package", "aipu-dkms") == package
                and row["cells"].get("build", {}).get("status") != "excluded"
                and _version_tuple(row["kernel"].split("-")[0].split("+")[0])[:2] > tested_max
            }
        )
        notes += [
            f"  {kernel} is newer than {package}'s kernel.tested_max "
            f"({'.'.join(map(str, tested_max))}) in dkms/{package}.yaml: raise it "
            "once this matrix passes"
            for kernel in newer
        ]
    return notes


def write_report(report: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    partial.replace(path)
