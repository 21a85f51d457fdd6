"""The Zhouyi checks as a declared chain: the board, the aipu driver's shared checks, then
libnoe and the models. A step whose needs failed is skipped, saying why."""

from __future__ import annotations

from pathlib import Path

from npuctl.doctor.chain import Step, run_chain
from npuctl.doctor.dkms_driver import DriverChecks
from npuctl.doctor.findings import Report, skip
from npuctl.doctor.run import Options
from npuctl.drivers import for_platform
from npuctl.system import System

from .. import DEFAULT_TIMEOUT_MS
from . import host, npu, pairing
from .noe_paths import check_noe_paths

DRIVER = for_platform("zhouyi")


def check(system: System, options: Options, report: Report) -> None:
    library_path = Path(str(options.platform_options.get("library") or ""))
    timeout_ms = int(str(options.platform_options.get("timeout_ms") or DEFAULT_TIMEOUT_MS))
    if not host.check_platform(system, report):
        for finding_id, what in (
            ("kernel", "Kernel, DKMS, module and device"),
            ("libnoe", "libnoe and models"),
        ):
            skip(report, finding_id, finding_id, what, "no Zhouyi NPU on this machine")
        return
    driver = DriverChecks(system, DRIVER, report, explain_unbound=host.explain_unbound)

    def models() -> None:
        if options.quick:
            skip(report, "models", "models", "Models", "--quick")
            return
        npu.check_models(
            options.manifest,
            options.models_dir,
            library_path,
            report,
            options.timeout_s,
            timeout_ms,
        )

    run_chain(
        [
            *driver.steps(needs=()),
            driver.device_step(needs=("bound",)),
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
            Step("models", "models", "models", "Models", models, ("libnoe",)),
            Step("text", "text", "text", "Text cleaning", lambda: npu.check_text_cleaning(report)),
            Step(
                "noe-paths",
                "noe-paths",
                "libnoe",
                "libnoe paths",
                lambda: check_noe_paths(system, report, options.timeout_s),
            ),
        ],
        report,
    )
