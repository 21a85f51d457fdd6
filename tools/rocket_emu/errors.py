"""A failure of the emulated board names its stage in one line."""

from __future__ import annotations

from enum import IntEnum, StrEnum


class Stage(StrEnum):
    INPUTS = "inputs"
    QEMU_BUILD = "QEMU build"
    KERNEL_FETCH = "kernel fetch"
    DKMS_BUILD = "DKMS build"
    BOOT = "boot"
    PROBE = "probe"
    TEFLON = "Teflon"
    NUMBERS = "numbers"
    SERVE = "serve"


class ExitCode(IntEnum):
    OK = 0
    FAILED = 1  # a check of the board failed
    USAGE = 2
    INPUT = 3  # a pinned input is missing or does not match its pin
    BUILD = 4  # QEMU, the guest or a module did not build


class EmulationError(Exception):
    def __init__(self, stage: Stage, message: str, code: ExitCode = ExitCode.BUILD) -> None:
        super().__init__(f"{stage}: {message}")
        self.stage = stage
        self.code = code
