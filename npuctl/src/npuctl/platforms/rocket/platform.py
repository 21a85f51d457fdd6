"""The rocket family's entry in npuctl: what it says and finds, the steps of its doctor,
provision and bench, its run commands (npuctl.platform's interface)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from npuctl.platform import BenchRun, Board, LazyCommand, Platform

from .facts import CDI_KIND, DEFAULT_DELEGATE, NAME, locate

if TYPE_CHECKING:
    from npuctl.cdi.spec import NpuEdits
    from npuctl.doctor.chain import Step
    from npuctl.doctor.findings import Report
    from npuctl.doctor.options import Options
    from npuctl.provision.actions import Action, Request
    from npuctl.system import System

COMMANDS = f"{__package__}.commands"  # the run commands' module


class Rocket(Platform):
    name = NAME
    title = "RK3588 NPU, rocket driver (Orange Pi 5 Plus)"
    absent = "no rockchip,rk3588 SoC in the device tree"
    serves = True
    serve_workers = 3  # the NPU's three cores; Mesa's rocket runs one job stream per core
    cdi_kind = CDI_KIND
    container_image = "npuctl-rocket"  # with Mesa's Teflon and the TFLite runtime
    device_paths = ("/dev/accel/accel0",)
    provision_actions = ("group", "backports", "teflon-pin", "teflon", "litert", "models")
    global_options = (
        click.option(
            "--delegate",
            type=click.Path(path_type=Path),
            envvar="NPUCTL_TEFLON",
            default=DEFAULT_DELEGATE,
            show_default=True,
            help="Rocket: Mesa's Teflon TensorFlow Lite delegate to use.",
        ),
    )

    def locate(self, system: System) -> str | None:
        return locate(system)

    def check_board(self, system: System, report: Report) -> Board | None:
        from . import doctor

        return doctor.check_board(system, report)

    def check_driver(
        self, system: System, options: Options, report: Report, board: Board
    ) -> list[Step]:
        from . import doctor

        return doctor.driver_steps(system, report, board)

    def check_user_space(self, system: System, options: Options, report: Report) -> list[Step]:
        from . import doctor

        return doctor.user_space_steps(system, options, report)

    def check_models(self, system: System, options: Options, report: Report) -> list[Step]:
        from . import doctor

        return doctor.model_steps(system, options, report)

    def default_provision(self, request: Request) -> list[str]:
        return list(self.provision_actions)

    def provision(self, name: str, request: Request) -> Action:
        from . import provision

        return provision.action(name, request)

    def bench(self, run: BenchRun) -> tuple[Path, dict[str, list[float]]]:
        from . import bench

        return bench.bench(run)

    def run_commands(self) -> dict[str, LazyCommand]:
        return {
            "mobilenet": LazyCommand(
                "Classify images with MobileNet V1 (rocket).", f"{COMMANDS}:mobilenet"
            ),
            "mobilenet-v2": LazyCommand(
                "Classify images with MobileNet V2 (rocket).", f"{COMMANDS}:mobilenet_v2"
            ),
            "ssdlite": LazyCommand(
                "Detect objects with SSDLite MobileDet (rocket).", f"{COMMANDS}:ssdlite"
            ),
        }

    def cdi_edits(self, system: System, options: dict[str, object]) -> NpuEdits | None:
        from . import cdi

        return cdi.edits(system, options)


PLATFORM = Rocket()
