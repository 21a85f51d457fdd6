"""A failure of the emulated board names its stage in one line."""

from __future__ import annotations

from enum import StrEnum

from pipeline.errors import BuildError, ExitCode


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


class EmulationError(BuildError):
    def __init__(self, stage: Stage, message: str, code: ExitCode = ExitCode.BUILD) -> None:
        super().__init__(f"{stage}: {message}", code)
        self.stage = stage
