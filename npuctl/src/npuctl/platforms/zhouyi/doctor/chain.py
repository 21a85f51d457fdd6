"""The Zhouyi doctor's stages. The board: a CIX Sky1 with its NPU described. The driver: the
aipu driver's shared checks. The user space: the driver and libnoe as a pair, libnoe opening
the NPU in a child. The models: each loaded in a child, run and compared (CLIP's text and
image agree, YOLO finds the golden picture's objects), the text cleaning, libnoe's paths."""

from __future__ import annotations

from pathlib import Path

from npuctl.doctor.chain import Step
from npuctl.doctor.dkms_driver import DriverChecks
from npuctl.doctor.findings import Finding, Report, Status, skip
from npuctl.doctor.options import Options
from npuctl.drivers import installed_for_platform
from npuctl.platform import Board
from npuctl.system import System

from ..facts import DEFAULT_TIMEOUT_MS, locate
from ..user_space import library_name
from . import host, npu, pairing
from .noe_paths import check_noe_paths


def _library(options: Options) -> Path:
    return Path(str(options.platform_options.get("library") or ""))


def check_board(system: System, report: Report) -> Board | None:
    if not host.check_platform(system, report):
        for finding_id, what in (
            ("kernel", "Kernel, DKMS, module and device"),
            ("libnoe", "libnoe and models"),
        ):
            skip(report, finding_id, finding_id, what, "no Zhouyi NPU on this machine")
        return None
    return Board(locate(system) or "")


def driver_steps(system: System, report: Report) -> list[Step]:
    # Either driver line (aipu-dkms's CIX 5.11, or Arm China's Compass): the one installed.
    installed = installed_for_platform(system, "zhouyi")
    driver = DriverChecks(system, installed, report, explain_unbound=host.explain_unbound)
    return [*driver.steps(needs=()), driver.device_step(needs=("bound",))]


def user_space_steps(system: System, options: Options, report: Report) -> list[Step]:
    library_path = _library(options)
    return [
        Step(
            "pair",
            pairing.FINDING,
            pairing.AREA,
            "Driver and libnoe versions",
            lambda: pairing.check_pair(system, library_path, report, options.timeout_s),
            ("device",),
            "the kernel driver and libnoe do not work together",
        ),
        Step(
            "libnoe",
            "libnoe.context",
            "libnoe",
            "libnoe",
            lambda: npu.check_library(library_path, report, options.timeout_s),
            ("pair",),
            "libnoe cannot open the NPU",
        ),
    ]


def model_steps(system: System, options: Options, report: Report) -> list[Step]:
    timeout_ms = int(str(options.platform_options.get("timeout_ms") or DEFAULT_TIMEOUT_MS))

    def models() -> None:
        if options.quick:
            skip(report, "models", "models", "Models", "--quick")
            return
        if library_name(_library(options)) == "libaipudrv":
            report.add(
                Finding(
                    "models",
                    "models",
                    Status.WARN,
                    "Models: the known models are CIX's .cix files, which libaipudrv cannot load",
                    "A .cix is CIX's container (a flatbuffer around the graph) for libnoe; "
                    "Arm China's libaipudrv loads Compass loadable graphs (an ELF with e_machine "
                    "0x29a, or an 'AIPU BIN' file) built by Arm China's Compass NN compiler for "
                    "target X2_1204 (docs/driver-lines.md).",
                    fix="sudo apt install aipu-dkms   # and CIX's libnoe, to run the .cix models",
                )
            )
            return
        npu.check_models(
            options.manifest,
            options.models_dir,
            _library(options),
            report,
            options.timeout_s,
            timeout_ms,
        )

    return [
        Step("models", "models", "models", "Models", models, ("libnoe",)),
        Step("text", "text", "text", "Text cleaning", lambda: npu.check_text_cleaning(report)),
        # Where the Python bindings of the vendor's libnoe live: it explains a failure above
        # without being needed by it, so it comes last and needs nothing.
        Step(
            "noe-paths",
            "noe-paths",
            "libnoe",
            "libnoe paths",
            lambda: check_noe_paths(system, report, options.timeout_s),
        ),
    ]
