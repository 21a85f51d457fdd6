"""The kernel matrix: for each Debian suite, the package's whole life cycle on real kernels.

Per suite, in a fresh chroot: install the package (DKMS builds for the installed kernel),
install a second kernel's headers (the automatic rebuild of a kernel upgrade), install amd64
headers (a foreign kernel must be skipped, apt must succeed), upgrade the package, boot the
kernels in QEMU with the DKMS-built module, build the patched tree with -Werror, purge.
Every step is timed and recorded; a failure is a failed row with the first error, never a
silent pass.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from . import acpi, kernels, qemu, scenarios
from .chroot import Chroot, Suite, create_chroot
from .kernels import Kernel

COLUMNS = (
    "build",
    "autoinstall",
    "foreign-skip",
    "package-upgrade",
    "purge",
    "qemu",
    "acpi",
    "warnings",
)
SCHEMA_VERSION = 1


@dataclass
class Cell:
    status: str  # ok | failed | skipped | known-issue | n/a
    seconds: float = 0.0
    detail: str = ""
    parts: dict[str, str] = field(default_factory=dict)  # e.g. one result per ACPI variant


@dataclass
class Row:
    suite: str
    kernel: str
    role: str  # installed | upgrade
    cells: dict[str, Cell] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(cell.status in ("ok", "n/a", "known-issue") for cell in self.cells.values())


@dataclass(frozen=True)
class Packages:
    deb: Path
    version: str
    next_deb: Path
    next_version: str
    patched_tree: Path


@dataclass(frozen=True)
class Plan:
    """How a suite's two kernels are chosen: the installed one and the upgrade."""

    suite: Suite
    first: str  # "meta" (current ABI) or "previous" (the ABI before it)
    upgrade: str  # "meta" or a flavour such as "cloud-arm64"


class SuiteRun:
    def __init__(self, plan: Plan, packages: Packages, workdir: Path, log: Path) -> None:
        self.plan = plan
        self.suite = plan.suite
        self.packages = packages
        self.workdir = workdir
        self.log_path = log
        self.rows: list[Row] = []
        self.notes: list[str] = []
        self.dkms_version = ""

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
        first, upgrade = self._choose_kernels(chroot)
        first_row = Row(self.suite.name, first.release, "installed")
        upgrade_row = Row(self.suite.name, upgrade.release, "upgrade")
        self.rows += [first_row, upgrade_row]
        self.log(
            "install headers " + first.headers,
            kernels.install(chroot, first, target_release=release),
        )

        build = self.cell(first_row, "build", lambda: self._install(chroot, first))
        self.cell(first_row, "warnings", lambda: self._werror(chroot, first))
        first_row.cells["autoinstall"] = Cell("n/a")
        if build.status == "ok":
            auto = self.cell(
                upgrade_row, "autoinstall", lambda: self._kernel_upgrade(chroot, upgrade)
            )
            upgrade_row.cells["build"] = Cell(auto.status, 0.0, "built by the autoinstall")
        else:
            for column in ("build", "autoinstall"):
                upgrade_row.cells[column] = Cell("skipped", detail="package install failed")
        self.cell(upgrade_row, "warnings", lambda: self._werror(chroot, upgrade))
        if build.status != "ok":
            return

        modules = {kernel.release: _module_file(chroot, kernel) for kernel in (first, upgrade)}
        self.cell(first_row, "qemu", lambda: self._boot(chroot, first, modules, foreign=upgrade))
        self.cell(first_row, "acpi", lambda: self._boot_acpi(chroot, first, modules))
        if upgrade.release.split("-")[0] != first.release.split("-")[0]:
            self.cell(
                upgrade_row, "qemu", lambda: self._boot(chroot, upgrade, modules, foreign=first)
            )
            self.cell(upgrade_row, "acpi", lambda: self._boot_acpi(chroot, upgrade, modules))
        else:
            for column in ("qemu", "acpi"):
                upgrade_row.cells[column] = Cell("n/a", detail="same kernel version as above")

        self.cell(first_row, "foreign-skip", lambda: self._foreign(chroot))
        self.cell(
            first_row, "package-upgrade", lambda: self._package_upgrade(chroot, (first, upgrade))
        )
        self.cell(first_row, "purge", lambda: self._purge(chroot))
        for column in ("foreign-skip", "package-upgrade", "purge"):
            upgrade_row.cells[column] = Cell("n/a", detail="checked on the row above")

    def _choose_kernels(self, chroot: Chroot) -> tuple[Kernel, Kernel]:
        release = self.suite.target_release
        meta = kernels.resolve(chroot, target_release=release)
        if self.plan.first == "previous":
            first = kernels.resolve(
                chroot, kernels.previous_abi(chroot, meta, release), target_release=release
            )
        else:
            first = meta
        if self.plan.upgrade == "meta":
            upgrade = meta
        else:
            upgrade = kernels.resolve(
                chroot, kernels.flavour_of(first, self.plan.upgrade), target_release=release
            )
        return first, upgrade

    # -- steps -------------------------------------------------------------------------
    def _install(self, chroot: Chroot, kernel: Kernel) -> Cell:
        step = scenarios.install_deb(chroot, self.packages.deb)
        self.log("install package", step.output)
        if not step.ok:
            return Cell("failed", detail=self._build_error(chroot, step.output))
        return self._module_check(chroot, kernel, self.packages.version)

    def _module_check(self, chroot: Chroot, kernel: Kernel, version: str) -> Cell:
        state = scenarios.dkms_status(chroot).get(kernel.release)
        if state != "installed":
            return Cell(
                "failed",
                detail=f"dkms status for {kernel.release}: {state}; "
                + self._build_error(chroot, ""),
            )
        modules = scenarios.installed_modules(chroot, kernel)
        if len(modules) != 1:
            return Cell("failed", detail=f"expected one aipu.ko, found {modules}")
        info = scenarios.modinfo(chroot, modules[0])
        if info.get("version") != version:
            return Cell("failed", detail=f"modinfo version {info.get('version')} != {version}")
        if info.get("vermagic", "").split(" ")[0] != kernel.release:
            return Cell("failed", detail=f"vermagic {info.get('vermagic')}")
        return Cell("ok", detail=f"{modules[0]} version {version}")

    def _build_error(self, chroot: Chroot, output: str) -> str:
        logs = sorted(chroot.path("/var/lib/dkms/aipu").rglob("make.log"))
        for log in logs:
            for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
                if re.search(r"\berror\b", line):
                    return _one_line(line)
        lines = [line for line in output.splitlines() if re.search(r"error|Error", line)]
        return _one_line(lines[0]) if lines else "see the log"

    def _kernel_upgrade(self, chroot: Chroot, kernel: Kernel) -> Cell:
        output = kernels.install(chroot, kernel, target_release=self.suite.target_release)
        self.log("kernel upgrade: install headers " + kernel.headers, output)
        cell = self._module_check(chroot, kernel, self.packages.version)
        if cell.status == "ok" and "aipu" not in output:
            return Cell("failed", detail="module present but the headers' hook did not build")
        return cell

    def _werror(self, chroot: Chroot, kernel: Kernel) -> Cell:
        if not chroot.path(f"/lib/modules/{kernel.release}/build").exists():
            kernels.install(chroot, kernel, target_release=self.suite.target_release)
        step = scenarios.werror_build(chroot, kernel, self.packages.patched_tree)
        self.log(f"-Werror build for {kernel.release}", step.output)
        if not step.ok:
            return Cell("failed", detail=step.facts.get("first_error", "build failed"))
        count = int(step.facts["warnings"])
        if count:
            return Cell("failed", detail=f"{count} warnings: {step.facts['first_warning']}")
        return Cell("ok", detail="0 warnings (KCFLAGS=-Werror), 0 modpost warnings")

    def _boot(
        self, chroot: Chroot, kernel: Kernel, modules: dict[str, Path | None], foreign: Kernel
    ) -> Cell:
        module = modules.get(kernel.release)
        if module is None:
            return Cell("skipped", detail="no module was built for this kernel")
        image = qemu.kernel_image(chroot, kernel.release)
        result = qemu.boot(
            image, module, qemu.busybox(chroot), modules.get(foreign.release), kernel.release
        )
        self.log(f"qemu {kernel.release}", result.console)
        problems = result.problems(expect_foreign_refusal=modules.get(foreign.release) is not None)
        if problems:
            return Cell("failed", detail="; ".join(problems[:3]))
        foreign_checked = modules.get(foreign.release) is not None
        return Cell(
            "ok",
            detail=f"loaded by modalias, insmod, probe, rmmod, {qemu.CYCLES} cycles, "
            + ("foreign module refused, " if foreign_checked else "no foreign module offered, ")
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

    def _foreign(self, chroot: Chroot) -> Cell:
        result = chroot.run("apt-get install -y -q linux-headers-amd64", check=False)
        output = result.stdout + result.stderr
        self.log("foreign kernel: linux-headers-amd64", output)
        amd64 = [release for release in scenarios.dkms_status(chroot) if release.endswith("-amd64")]
        old_dkms = _version_tuple(self.dkms_version) < (3, 2)
        if result.returncode == 0 and not amd64:
            return Cell("ok", detail="apt exit 0, kernel skipped (BUILD_EXCLUSIVE)")
        chroot.run(
            "apt-get purge -y -q 'linux-headers-*-amd64' linux-headers-amd64 || "
            "dpkg --purge --force-all $(dpkg-query -W -f='${Package} ' "
            "'linux-headers-*amd64*')",
            check=False,
        )
        if old_dkms:
            return Cell(
                "known-issue",
                detail=f"dkms {self.dkms_version} fails instead of "
                f"skipping (apt exit {result.returncode}); fixed in dkms 3.2.2",
            )
        return Cell("failed", detail=f"apt exit {result.returncode}, dkms states {amd64}")

    def _package_upgrade(self, chroot: Chroot, kernel_pair: tuple[Kernel, Kernel]) -> Cell:
        step = scenarios.install_deb(chroot, self.packages.next_deb)
        self.log("package upgrade", step.output)
        if not step.ok:
            return Cell("failed", detail=self._build_error(chroot, step.output))
        for kernel in kernel_pair:
            cell = self._module_check(chroot, kernel, self.packages.next_version)
            if cell.status != "ok":
                return cell
        old = [
            path
            for path in (
                f"/var/lib/dkms/aipu/{self.packages.version}",
                f"/usr/src/aipu-{self.packages.version}",
            )
            if chroot.path(path).exists()
        ]
        if old:
            return Cell("failed", detail=f"old version left behind: {old}")
        return Cell("ok", detail=f"rebuilt as {self.packages.next_version} for both kernels")

    def _purge(self, chroot: Chroot) -> Cell:
        step = scenarios.purge(chroot, "aipu-dkms")
        self.log("purge", step.output)
        left = scenarios.leftovers(chroot)
        if not step.ok or left:
            return Cell("failed", detail=f"apt exit {step.returncode}, left: {left}")
        return Cell("ok", detail="no aipu.ko, no /usr/src/aipu-*, no DKMS tree")


def _module_file(chroot: Chroot, kernel: Kernel) -> Path | None:
    modules = scenarios.installed_modules(chroot, kernel)
    if not modules:
        return None
    # Copied out: the package upgrade and purge steps replace or remove it.
    keep = chroot.root.parent / f"{kernel.release}.aipu.ko"
    keep.write_bytes(chroot.path(modules[0]).read_bytes())
    return keep


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version)[:3])


def _one_line(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= 300 else line[:297] + "..."


def run_matrix(plans: list[Plan], packages: Packages, workdir: Path, jobs: int = 2) -> dict:
    """Run every suite (``jobs`` at a time) and return the report."""
    workdir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    runs = [
        SuiteRun(plan, packages, workdir / plan.suite.name, workdir / f"{plan.suite.name}.log")
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

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        outcomes = list(pool.map(execute, runs))
    return {
        "schema": SCHEMA_VERSION,
        "generated": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "seconds": round(time.monotonic() - started, 1),
        "package": {"version": packages.version, "next_version": packages.next_version},
        "columns": list(COLUMNS),
        "suites": [
            {
                "suite": run.suite.name,
                "dkms": run.dkms_version,
                "seconds": round(seconds, 1),
                "error": error,
                "log": str(run.log_path),
            }
            for run, seconds, error in outcomes
        ],
        "rows": [
            {
                "suite": row.suite,
                "kernel": row.kernel,
                "role": row.role,
                "ok": row.ok,
                "cells": {column: asdict(cell) for column, cell in row.cells.items()},
            }
            for run, _, _ in outcomes
            for row in run.rows
        ],
    }


def report_ok(report: dict) -> bool:
    return (
        all(row["ok"] for row in report["rows"])
        and not any(suite["error"] for suite in report["suites"])
        and bool(report["rows"])
    )


def format_table(report: dict) -> str:
    symbol = {"ok": "ok", "failed": "FAIL", "skipped": "skip", "known-issue": "known", "n/a": "-"}
    header = ["suite", "kernel", *report["columns"]]
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
        lines.append([row["suite"], row["kernel"], *cells])
    widths = [max(len(str(line[i])) for line in [header, *lines]) for i in range(len(header))]
    out = [
        "  ".join(str(value).ljust(width) for value, width in zip(line, widths, strict=True))
        for line in [header, *lines]
    ]
    failures = [
        f"  {row['kernel']} {column}: {cell['detail']}"
        for row in report["rows"]
        for column, cell in row["cells"].items()
        if cell["status"] in ("failed", "known-issue", "skipped")
    ]
    suite_errors = [
        f"  {suite['suite']}: {suite['error']} (log: {suite['log']})"
        for suite in report["suites"]
        if suite["error"]
    ]
    notes = failures + suite_errors + untested_range(report)
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
    """Kernels newer than aipu.yaml's kernel.tested_max: the package description must not
    claim them until a matrix has proven them."""
    from aipu_build.config import load_config

    tested_max = _version_tuple(load_config().kernel_tested_max)
    newer = sorted(
        {
            row["kernel"]
            for row in report["rows"]
            if _version_tuple(row["kernel"].split("-")[0].split("+")[0])[:2] > tested_max
        }
    )
    return [
        f"  {kernel} is newer than kernel.tested_max ({'.'.join(map(str, tested_max))}) in "
        "aipu.yaml: raise it once this matrix passes"
        for kernel in newer
    ]


def write_report(report: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    partial.replace(path)
