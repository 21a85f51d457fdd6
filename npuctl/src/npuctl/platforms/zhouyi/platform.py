"""The Zhouyi family's entry in npuctl: what it says and finds, the steps of its doctor,
provision and bench, its commands and embedder (npuctl.platform's interface)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from npuctl.platform import BenchRun, Board, LazyCommand, Platform

if TYPE_CHECKING:
    from npuctl.cdi.spec import NpuEdits
    from npuctl.doctor.chain import Step
    from npuctl.doctor.findings import Report
    from npuctl.doctor.options import Options
    from npuctl.embedder import Embedder
    from npuctl.provision.actions import Action, Request
    from npuctl.settings import Settings
    from npuctl.system import System

from .facts import CDI_KIND, DEFAULT_LIBRARY, DEFAULT_TIMEOUT_MS, MAX_TIMEOUT_MS, NAME, locate
from .user_space import installed_library

COMMANDS = f"{__package__}.commands"  # the run commands' module


class Zhouyi(Platform):
    name = NAME
    title = "Zhouyi NPU, CIX Sky1 (Orange Pi 6 Plus)"
    absent = "no CIXH4000 ACPI device or armchina,zhouyi node"
    serves = True
    embeds = True
    cdi_kind = CDI_KIND
    device_paths = ("/dev/aipu",)
    provision_actions = ("group", "models", "umd", "ld-path")
    global_options = (
        click.option(
            "--library",
            type=click.Path(path_type=Path),
            envvar="NPUCTL_LIBNOE",
            default=installed_library,
            show_default=DEFAULT_LIBRARY,
            help=(
                "Zhouyi: libnoe.so to use, or Arm China's libaipudrv.so.6 (the default where "
                "it is installed and libnoe is not, or with aipu-compass-dkms)."
            ),
        ),
        click.option(
            "--timeout-ms",
            type=click.IntRange(1, MAX_TIMEOUT_MS),
            default=DEFAULT_TIMEOUT_MS,
            show_default=True,
            help="Zhouyi: timeout of one inference (at most 2147483647, libnoe's int32).",
        ),
    )
    provision_options = (
        click.option(
            "--umd-deb",
            type=click.Path(path_type=Path, exists=True, dir_okay=False),
            default=None,
            help="Zhouyi: CIX's cix-noe-umd .deb to install without its pip postinst.",
        ),
        click.option(
            "--ld-path",
            is_flag=True,
            help="Zhouyi: also add libnoe's folder to the linker path (npuctl loads it by path).",
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

        return doctor.driver_steps(system, report)

    def check_user_space(self, system: System, options: Options, report: Report) -> list[Step]:
        from . import doctor

        return doctor.user_space_steps(system, options, report)

    def check_models(self, system: System, options: Options, report: Report) -> list[Step]:
        from . import doctor

        return doctor.model_steps(system, options, report)

    def default_provision(self, request: Request) -> list[str]:
        return [
            "group",
            "models",
            *(["umd"] if request.options.get("umd_deb") else []),
            *(["ld-path"] if request.options.get("ld_path") else []),
        ]

    def provision(self, name: str, request: Request) -> Action:
        from . import provision

        return provision.action(name, request)

    def bench(self, run: BenchRun) -> tuple[Path, dict[str, list[float]]]:
        from . import bench

        return bench.bench(run)

    def commands(self) -> dict[str, LazyCommand]:
        return {
            "cfg": LazyCommand(
                "Check CixBuilder configs before compiling (Zhouyi).",
                f"{__package__}.cfg_command:cfg",
            )
        }

    def run_commands(self) -> dict[str, LazyCommand]:
        return {
            "clip-text": LazyCommand("CLIP text embeddings (Zhouyi).", f"{COMMANDS}:clip_text"),
            "clip-image": LazyCommand(
                "CLIP image embeddings (Zhouyi).", f"{COMMANDS}:clip_image_command"
            ),
            "yolo": LazyCommand("YOLOv8 object detection (Zhouyi).", f"{COMMANDS}:yolo_command"),
        }

    def open_embedder(self, settings: Settings) -> Embedder:
        from .embedder import open_embedder

        return open_embedder(settings)

    def cdi_edits(self, system: System, options: dict[str, object]) -> NpuEdits | None:
        from . import cdi

        return cdi.edits(system, options)


PLATFORM = Zhouyi()
