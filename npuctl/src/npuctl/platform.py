"""What a platform (one NPU family) brings to npuctl: one typed interface, the same stages in
every family. The shared parts (command line, doctor report, model store, provision, CDI, the
server and the agent) reach a family only through it; `make lint` type-checks every family
against it.

A family is a package ``npuctl.platforms.NAME`` whose ``PLATFORM`` is an instance of a
``Platform`` subclass. Its facts are class attributes; its stages are methods, each importing
the family's heavy modules (runtime, doctor chain, pipelines) when it runs, so that naming the
families costs nothing. The stages, in the order a board goes through them:

1. ``locate``: detect the board (where the firmware describes the NPU);
2. the doctor's stages, which it runs as one chain in this order (a failed prerequisite skips
   what depends on it, saying why): ``check_board`` (the NPU described and enabled),
   ``check_driver`` (the kernel side, ending in the device node), ``check_user_space`` (the
   libraries and runtime that drive it, each proven in a child process first) and
   ``check_models`` (each model loaded in a child process first, then an input prepared, run,
   post-processed and compared with the CPU or a reference: the golden check);
3. ``provision`` and ``default_provision``: finish the board's set-up;
4. ``bench``: time a model's stages;
5. ``run_commands`` and ``commands``: run the models from the command line;
6. ``open_embedder``, and ``serves`` (its adapter to the server is
   ``npuctl.serve.families.NAME``, shipped with the server): embeddings and serving;
7. ``cdi_edits``: the NPU in containers.
"""

from __future__ import annotations

import importlib
import sys
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import click

from .errors import ExitCode, NpuctlError

if TYPE_CHECKING:
    from .cdi.spec import NpuEdits
    from .doctor.chain import Step
    from .doctor.findings import Report
    from .doctor.options import Options
    from .embedder import Embedder
    from .models.manifest import Entry
    from .provision.actions import Action, Request
    from .settings import Settings
    from .system import System

# click.option(...): what it decorates is a function until click.command makes it a command.
Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]


@dataclass(frozen=True)
class BenchRun:
    """What 'npuctl bench' asks a family to time."""

    settings: Settings
    entry: Entry
    model: Path | None  # a file instead of the managed one
    iterations: int
    warmup: int
    shown: bool  # a progress bar on the terminal


@dataclass(frozen=True)
class Board:
    """What the doctor's board stage found."""

    where: str  # where the firmware describes the NPU ("ACPI device CIXH4000:00")
    cores: int = 1  # the NPU cores it enables


@dataclass(frozen=True)
class LazyCommand:
    """A command of a family, imported only when it runs (its help line is shown before):
    ``where`` is "module:attribute"."""

    help: str
    where: str

    def load(self) -> click.Command:
        module, _, attribute = self.where.partition(":")
        command = getattr(importlib.import_module(module), attribute)
        assert isinstance(command, click.Command), self.where
        return command


class Platform(ABC):
    name: ClassVar[str]  # the --platform value and the models' "platform"
    title: ClassVar[str]  # the NPU and the board it is found on, for people
    absent: ClassVar[str]  # what is missing when locate finds nothing
    # Options of the whole command line ('npuctl --OPTION ...') the family's runtime reads.
    global_options: ClassVar[tuple[Decorator, ...]] = ()
    # Options of 'npuctl provision' that only this family's actions read.
    provision_options: ClassVar[tuple[Decorator, ...]] = ()
    # The names of its provision actions, in order.
    provision_actions: ClassVar[tuple[str, ...]] = ()
    # Whether npuctl.serve.families.NAME serves its models ('npuctl serve').
    serves: ClassVar[bool] = False
    # 'npuctl serve --workers' on a fleet node: NPU owner threads the runtime can use at once.
    serve_workers: ClassVar[int] = 1
    # Whether open_embedder gives in-process embeddings ('npuctl watch').
    embeds: ClassVar[bool] = False
    # The CDI kind (vendor/class) of its NPU, and its device nodes as a device plugin shares
    # them ('npuctl k8s render').
    cdi_kind: ClassVar[str] = ""
    device_paths: ClassVar[tuple[str, ...]] = ()
    # The container image 'make image' builds for its nodes (images/<name>.yaml), which
    # 'npuctl k8s render' names by default.
    container_image: ClassVar[str] = "npuctl"

    @property
    def package(self) -> str:
        """The Python package that implements it (and holds its models.yaml): its class's
        module's package (the class may live in the package's __init__ or a module of it)."""
        module = type(self).__module__
        return sys.modules[module].__package__ or module

    @abstractmethod
    def locate(self, system: System) -> str | None:
        """Where the NPU is described on this machine ("ACPI device CIXH4000:00"), or None."""

    @abstractmethod
    def check_board(self, system: System, report: Report) -> Board | None:
        """The board finding: the NPU described and enabled. None when it is not, after
        reporting why and the stages it therefore skips."""

    @abstractmethod
    def check_driver(
        self, system: System, options: Options, report: Report, board: Board
    ) -> list[Step]:
        """The kernel side as chain steps, ending in the device node (the step "device")."""

    @abstractmethod
    def check_user_space(self, system: System, options: Options, report: Report) -> list[Step]:
        """The libraries and runtime that drive the NPU, each proven in a child process."""

    @abstractmethod
    def check_models(self, system: System, options: Options, report: Report) -> list[Step]:
        """Each model loaded in a child process first, then an input prepared, run,
        post-processed and compared with the CPU or a reference (the golden check)."""

    @abstractmethod
    def default_provision(self, request: Request) -> list[str]:
        """The actions 'npuctl provision' runs when none is named."""

    @abstractmethod
    def provision(self, name: str, request: Request) -> Action:
        """One of ``provision_actions``."""

    @abstractmethod
    def bench(self, run: BenchRun) -> tuple[Path, dict[str, list[float]]]:
        """The model's file and each stage's timings, in seconds."""

    def run_commands(self) -> dict[str, LazyCommand]:
        """'npuctl run NAME' subcommands."""
        return {}

    def commands(self) -> dict[str, LazyCommand]:
        """Top-level commands of its own ('npuctl NAME')."""
        return {}

    def open_embedder(self, settings: Settings) -> Embedder:
        """In-process embeddings, where ``embeds``."""
        raise NpuctlError(f"the {self.title} embeds nothing", ExitCode.USAGE)

    def cdi_edits(self, system: System, options: dict[str, object]) -> NpuEdits | None:
        """What a container needs to reach the NPU ('npuctl cdi'), or None if it cannot."""
        return None
