"""The files 'npuctl provision' installs: the project's provision/npuctl folder, shipped in
npuctl as provision/files, for the actions every family shares, and each family's own
site-files/ folder. Each folder's files.yaml says which action installs which file where; an
action writes exactly these files and --undo removes exactly these. Every file written is
recorded with its checksum (RECORD), so that purging the npuctl package removes the ones
still as written (its postrm), and the system is as it was."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from importlib.resources.abc import Traversable

import yaml

from ..system import System
from .actions import NFD_LABELS, Action, run_command, write_file

FOLDER = files(__package__).joinpath("files")
# What provision wrote and is still responsible for: "sha256  path" lines, read by npuctl's
# postrm on purge (debian/npuctl/npuctl.postrm).
RECORD = "/var/lib/npuctl/site-files"


@dataclass(frozen=True)
class SiteFile:
    folder: Traversable  # provision/npuctl, or a family's site-files
    source: str  # relative to the folder
    destination: str  # absolute, on the board

    def text(self) -> str:
        return self.folder.joinpath(self.source).read_text(encoding="utf-8")


def folders() -> list[Traversable]:
    """The shared folder, then each family's own."""
    from ..families import all_platforms

    found = [FOLDER]
    for platform in all_platforms():
        own = files(platform.package).joinpath("site-files")
        if own.joinpath("files.yaml").is_file():
            found.append(own)
    return found


@cache
def _table() -> dict[str, tuple[SiteFile, ...]]:
    table: dict[str, tuple[SiteFile, ...]] = {}
    for folder in folders():
        document = yaml.safe_load(folder.joinpath("files.yaml").read_text(encoding="utf-8"))
        for action, entries in document.items():
            table[action] = tuple(
                SiteFile(folder, str(item["file"]), str(item["to"])) for item in entries
            )
    return table


def for_action(name: str) -> tuple[SiteFile, ...]:
    return _table()[name]


def destinations() -> dict[str, tuple[str, ...]]:
    """Every action's files on the board, for the doctor to name."""
    return {name: tuple(f.destination for f in entries) for name, entries in _table().items()}


def installed(system: System, name: str) -> bool:
    return all(system.read(f.destination) == f.text().strip() for f in for_action(name))


def file_action(
    system: System,
    name: str,
    description: str,
    *,
    after_apply: Callable[[], None] | None = None,
    before_undo: Callable[[], None] | None = None,
    after_undo: Callable[[], None] | None = None,
    is_done: Callable[[], bool] | None = None,
    commands: tuple[str, ...] = (),
) -> Action:
    """An action that installs its files (files.yaml's) and removes them on --undo."""
    site_files = for_action(name)

    def apply() -> None:
        for site_file in site_files:
            write_file(system, site_file.destination, site_file.text())
            _record(system, site_file.destination, site_file.text())
        if after_apply:
            after_apply()

    def undo() -> None:
        if before_undo:
            before_undo()
        for site_file in site_files:
            system.path(site_file.destination).unlink(missing_ok=True)
            _record(system, site_file.destination, None)
        if after_undo:
            after_undo()

    shown: list[str] = []
    for site_file in site_files:
        shown.append(f"write {site_file.destination}:")
        shown.extend(f"    {line}" for line in site_file.text().strip().splitlines())
    where = ", ".join(site_file.destination for site_file in site_files)
    return Action(
        name,
        f"{description} ({where})",
        is_done or (lambda: installed(system, name)),
        apply,
        undo,
        (*shown, *commands),
    )


def nfd_action(system: System) -> Action:
    """A timer that runs the doctor every 5 minutes and writes Node Feature Discovery labels
    that expire after 15: a node whose NPU (or whose timer) dies loses its healthy label."""

    def start() -> None:
        if system.is_real:
            run_command(system, "systemctl", "daemon-reload")
            run_command(system, "systemctl", "enable", "--now", "npuctl-nfd.timer")

    def stop() -> None:
        if system.is_real:
            run_command(system, "systemctl", "disable", "--now", "npuctl-nfd.timer")

    return file_action(
        system,
        "nfd",
        "label this node for Kubernetes (Node Feature Discovery), refreshed every 5 minutes",
        after_apply=start,
        before_undo=stop,
        after_undo=lambda: system.path(NFD_LABELS).unlink(missing_ok=True),
        commands=("systemctl daemon-reload", "systemctl enable --now npuctl-nfd.timer"),
    )


def recorded(system: System) -> dict[str, str]:
    """The files provision wrote, by path, with the checksum of what it wrote."""
    found = {}
    for line in (system.read(RECORD) or "").splitlines():
        checksum, _, path = line.partition("  ")
        if checksum and path:
            found[path] = checksum
    return found


def _record(system: System, destination: str, text: str | None) -> None:
    """The record with ``destination`` as written now (None: removed)."""
    entries = recorded(system)
    entries.pop(destination, None)
    if text is not None:
        entries[destination] = hashlib.sha256(text.encode()).hexdigest()
    if entries:
        write_file(system, RECORD, "".join(f"{s}  {p}\n" for p, s in sorted(entries.items())))
    else:
        system.path(RECORD).unlink(missing_ok=True)
