"""What a platform (one NPU family) brings to npuctl. The shared parts (command line, doctor
report, model store, provision) reach a platform only through this description; its heavy
parts (runtime, doctor chain, pipelines) are modules under its package, imported on use.

A platform package ``npuctl.platforms.NAME`` exposes ``PLATFORM`` and these modules:

- ``doctor``: ``check(system, options, report)`` appends the family's findings in dependency
  order, after the shared platform finding;
- ``provision``: ``ACTIONS`` (names, in order), ``DEFAULT_ACTIONS`` and
  ``actions(request) -> list[Action]``;
- ``bench``: ``bench(settings, entry, model, iterations, warmup) -> dict`` of timed stages;
- ``models.yaml``: the models and files it knows by name.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from .system import System


@dataclass(frozen=True)
class Platform:
    name: str  # the --platform value and the models' "platform"
    title: str  # the NPU and the board it is found on, for people
    package: str  # the Python package that implements it
    # Where the NPU is described on this machine ("ACPI device CIXH4000:00"), or None.
    locate: Callable[[System], str | None]
    absent: str  # what is missing when locate finds nothing
    # 'npuctl run' subcommands: name -> (module under the package, attribute, help line)
    run_commands: dict[str, tuple[str, str, str]] = field(default_factory=dict)
    # Top-level commands of its own ('npuctl NAME'), in the same form
    commands: dict[str, tuple[str, str, str]] = field(default_factory=dict)
    # Options of the whole command line ('npuctl --OPTION ...') the platform's runtime reads.
    global_options: tuple[Callable[[click.Command], click.Command], ...] = ()
    # In-process embeddings ('npuctl watch'): (module under the package,
    # factory(settings) -> npuctl.embedder.Embedder), or None when the family embeds nothing.
    embedder: tuple[str, str] | None = None
    # 'npuctl serve': (its adapter's module, in npuctl.serve.families (shipped with the
    # server), factory(settings, models: tuple[str, ...] | None, workers: int)
    # -> npuctl.serve.models.Serving), or None when the family serves nothing yet.
    serving: tuple[str, str] | None = None
    # 'npuctl serve --workers' on a fleet node: NPU owner threads the runtime can use at once.
    serve_workers: int = 1
    # 'npuctl cdi': (module, edits(system, options) -> cdi.spec.NpuEdits), or None.
    cdi: tuple[str, str] | None = None
    # The CDI kind (vendor/class) of its NPU, and its device nodes as a device plugin shares
    # them ('npuctl k8s render').
    cdi_kind: str = ""
    device_paths: tuple[str, ...] = ()
    # The container image 'make image' builds for its nodes (images/<name>.yaml), which
    # 'npuctl k8s render' names by default.
    container_image: str = "npuctl"
    # Options of 'npuctl provision' that only this platform's actions read.
    provision_options: tuple[Callable[[click.Command], click.Command], ...] = ()

    def module(self, name: str) -> ModuleType:
        return importlib.import_module(f"{self.package}.{name}")
