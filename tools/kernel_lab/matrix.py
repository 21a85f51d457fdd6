"""The kernel matrix: for each Debian suite, the package's whole life cycle on real kernels.

Per suite, in a fresh chroot (one more for each alternative driver line, which replaces the
package it is an alternative to): install the package (DKMS builds for the installed kernel),
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
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, replace
from pathlib import Path

from pipeline.config import load_package

from . import distribution_kernels, kernels
from .chroot import Chroot, create_chroot
from .kernels import Kernel
from .matrix_boot import BootColumns
from .matrix_build import BuildColumns
from .matrix_cells import (
    COLUMNS,
    SCHEMA_VERSION,
    SUITE_WEIGHT,
    Cell,
    Packages,
    Plan,
    Row,
    module_file,
    one_line,
    remove_headers,
    version_tuple,
)
from .matrix_package import PackageColumns


class SuiteRun(BuildColumns, BootColumns, PackageColumns):
    """One suite's chroot: every driver package through the life cycle on every kernel."""

    def __init__(
        self,
        plan: Plan,
        packages: Packages | list[Packages],
        workdir: Path,
        log: Path,
        distributions: list[distribution_kernels.DistributionKernel] | None = None,
        cancelled: threading.Event | None = None,
    ) -> None:
        self.plan = plan
        self.cancelled = cancelled  # set: the run stops before its next step
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
        installed = self._install_on_each_kernel(chroot, chosen, rows)
        if not installed[self.packages.name]:
            return
        for build in self.builds:
            build_rows = [rows[build.name, kernel.release] for kernel in chosen]
            if installed[build.name]:
                modules = {k.release: module_file(chroot, k, build) for k in chosen}
                self._boots(chroot, chosen, build_rows, modules, build)
        for build in self.builds:
            self._initramfs(chroot, chosen, [rows[build.name, k.release] for k in chosen], build)
        # Derived from the suite's current ABI (in backports the row after the installed one).
        current = others[0] if self.plan.first == "previous" and others else first
        for distribution in self.distributions:
            self._distribution_kernel(chroot, current, distribution, installed)
        for kernel in others[1:]:
            # Only two kernels go on to the package upgrade: it rebuilds for each one.
            self.log(f"remove headers {kernel.headers}", remove_headers(chroot, kernel))
        self._package_steps(chroot, (first, *others[:1]), rows, installed)

    def _install_on_each_kernel(
        self, chroot: Chroot, chosen: list[Kernel], rows: dict[tuple[str, str], Row]
    ) -> dict[str, bool]:
        """The build column of the installed kernel (apt installs each package), then the
        autoinstall column of every other (apt installs its headers; DKMS's hook builds);
        the warnings column of each. Which packages installed."""
        first, *others = chosen
        release = self.suite.target_release
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
                self._autoinstall_cell(chroot, kernel, build, row, output, spent, installed)
                self._warnings(chroot, kernel, build, row)
        return installed

    def _autoinstall_cell(
        self,
        chroot: Chroot,
        kernel: Kernel,
        build: Packages,
        row: Row,
        output: str,
        spent: float,
        installed: dict[str, bool],
    ) -> None:
        if not installed[build.name]:
            for column in ("build", "autoinstall"):
                row.cells[column] = Cell("skipped", detail="package install failed")
            return
        auto = self.cell(
            row, "autoinstall", lambda: self._autoinstalled(chroot, kernel, build, output)
        )
        auto.seconds = round(auto.seconds + spent, 1)
        # A skip or failure says why in the build cell too, not only beside it.
        why = "" if auto.status == "ok" else f": {auto.detail}"
        row.cells["build"] = Cell(auto.status, 0.0, "by the autoinstall" + why)

    def _package_steps(
        self,
        chroot: Chroot,
        kept: tuple[Kernel, ...],
        rows: dict[tuple[str, str], Row],
        installed: dict[str, bool],
    ) -> None:
        """The package columns, on the installed kernel's row: foreign-skip, old-kernel-skip,
        package-upgrade (on the ``kept`` kernels) and purge."""
        present = [build for build in self.builds if installed[build.name]]
        first_rows = [rows[build.name, kept[0].release] for build in present]
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
    runs = []
    for plan in plans:
        for label, group in coinstallable_groups(builds):
            name = plan.suite.name + (f"+{label}" if label else "")
            runs.append(SuiteRun(plan, group, workdir / name, workdir / f"{name}.log"))

    def execute(run: SuiteRun) -> tuple[SuiteRun, float, str]:
        begun = time.monotonic()
        error = ""
        try:
            run.run()
        except Exception as exception:
            error = one_line(str(exception))
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


def coinstallable_groups(builds: list[Packages]) -> list[tuple[str, list[Packages]]]:
    """The packages that can share a chroot, and each alternative driver line on its own
    (it replaces the package it is an alternative to: installing both would test one), with
    the name its chroot and log are told apart by ("" for the shared one)."""
    alternative = {build.name for build in builds if load_package(build.name).alternative_to}
    shared = [build for build in builds if build.name not in alternative]
    groups = [("", shared)] if shared else []
    return groups + [(build.name, [build]) for build in builds if build.name in alternative]


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
        lines.append([row["suite"], row["package"], row["kernel"], *cells])
    widths = [max(len(str(line[i])) for line in [header, *lines]) for i in range(len(header))]
    out = [
        "  ".join(str(value).ljust(width) for value, width in zip(line, widths, strict=True))
        for line in [header, *lines]
    ]
    failures = [
        f"  {row['package']} {row['kernel']} {column}: {cell['detail']}"
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
            # Named by its chroot's log: an alternative driver line has one of its own.
            f"{Path(suite['log']).stem} {suite['seconds']:.0f}s (dkms {suite['dkms'] or '?'})"
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
    for package in sorted({row["package"] for row in report["rows"]}):
        tested_max = version_tuple(load_package(package).kernel_tested_max)
        newer = sorted(
            {
                row["kernel"]
                for row in report["rows"]
                if row["package"] == package
                and row["cells"].get("build", {}).get("status") != "excluded"
                and version_tuple(row["kernel"].split("-")[0].split("+")[0])[:2] > tested_max
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
