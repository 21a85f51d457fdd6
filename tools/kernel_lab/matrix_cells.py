"""The kernel matrix's records: a cell, a row, the packages under test, a suite's plan, and
what every column's steps share (the log, the timed cell)."""

from __future__ import annotations

import re
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from . import distribution_kernels, scenarios
from .chroot import Chroot, Suite
from .drivers import Driver
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
    package: str
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
    driver: Driver
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


class RunCancelled(BaseException):
    """The run's owner waits no longer: no step after this one (a BaseException, so that no
    step's own failure handling takes it for that step's failure)."""


class Recorder:
    """What every column of a suite's run shares: the suite, its log, and the cells it fills."""

    plan: Plan
    suite: Suite
    builds: list[Packages]
    packages: Packages
    log_path: Path
    rows: list[Row]
    distributions: list[distribution_kernels.DistributionKernel]
    cancelled: threading.Event | None = None

    def _go_on(self) -> None:
        if self.cancelled is not None and self.cancelled.is_set():
            raise RunCancelled()

    def log(self, title: str, text: str) -> None:
        with self.log_path.open("a", encoding="utf-8") as stream:
            stream.write(f"\n===== {title}\n{text}\n")

    def cell(self, row: Row, column: str, action: Callable[[], Cell]) -> Cell:
        self._go_on()
        started = time.monotonic()
        try:
            result = action()
        except Exception as error:  # a step's crash is that step's failure, not the run's
            output = getattr(getattr(error, "result", None), "stdout", "") or ""
            self.log(f"{row.kernel} {column} raised", traceback.format_exc() + output)
            result = Cell("failed", detail=one_line(str(error)))
        result.seconds = round(time.monotonic() - started, 1)
        row.cells[column] = result
        return result

    def _each(self, rows: list[Row], column: str, action: Callable[[], list[Cell]]) -> None:
        """One step shared by every package (one apt run): a cell for each package's row."""
        self._go_on()
        started = time.monotonic()
        try:
            cells = action()
        except Exception as error:
            self.log(f"{column} raised", traceback.format_exc())
            cells = [Cell("failed", detail=one_line(str(error))) for _ in rows]
        for row, cell in zip(rows, cells, strict=True):
            cell.seconds = round(time.monotonic() - started, 1)
            row.cells[column] = cell


def remove_headers(chroot: Chroot, kernel: Kernel) -> str:
    result = chroot.run(
        f"apt-get purge -y -q --allow-change-held-packages {kernel.headers}:arm64", check=False
    )
    return result.stdout + result.stderr


def module_file(chroot: Chroot, kernel: Kernel, build: Packages) -> Path | None:
    modules = scenarios.installed_modules(chroot, kernel, build.driver.module)
    if not modules:
        return None
    # Copied out: the package upgrade and purge steps replace or remove it.
    keep = chroot.root.parent / f"{kernel.release}.{build.driver.module}.ko"
    keep.write_bytes(chroot.path(modules[0]).read_bytes())
    return keep


def version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version)[:3])


def one_line(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= 300 else line[:297] + "..."
