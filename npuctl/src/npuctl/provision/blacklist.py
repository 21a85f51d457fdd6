"""Lift a blacklist of the NPU's driver module that a distribution or an administrator set
(Armbian blacklists aipu on its CIX images), and put it back with --undo.

A line in /etc/modprobe.d is commented out with a marker; a file elsewhere (a package's in
/usr/lib/modprobe.d, a runtime one in /run) is hidden by a copy of the same name in
/etc/modprobe.d with the line commented out, which is how modprobe.d(5) says to override a
file without editing it. The kernel command line is the boot loader's: it is only reported."""

from __future__ import annotations

from ..modprobe import ADMIN_DIR, blacklistings, lines_of, refuses
from ..system import System
from .actions import Action, write_file

MARKER = "# lifted by npuctl provision: "
OVERRIDE_HEADER = "# npuctl provision: hides {source} to lift its blacklist of {module}"


def _lifted(lines: list[str], module: str) -> str:
    return "".join((MARKER + line if refuses(line, module) else line) + "\n" for line in lines)


def _restored(lines: list[str]) -> str:
    return "".join(line.removeprefix(MARKER) + "\n" for line in lines)


def lift_blacklist_action(system: System, module: str) -> Action:
    def in_files() -> list[str]:
        return sorted({b.source for b in blacklistings(system, module) if not b.on_command_line})

    def apply() -> None:
        for source in in_files():
            name = source.rsplit("/", 1)[1]
            lines = lines_of(system, source)
            if source.startswith(ADMIN_DIR + "/"):
                write_file(system, source, _lifted(lines, module))
            else:
                header = OVERRIDE_HEADER.format(source=source, module=module)
                write_file(system, f"{ADMIN_DIR}/{name}", header + "\n" + _lifted(lines, module))

    def undo() -> None:
        for name in system.listdir(ADMIN_DIR):
            path = f"{ADMIN_DIR}/{name}"
            lines = lines_of(system, path)
            if lines and lines[0].startswith(OVERRIDE_HEADER.split("{", 1)[0]):
                system.path(path).unlink()
            elif any(line.startswith(MARKER) for line in lines):
                write_file(system, path, _restored(lines))

    return Action(
        "lift-blacklist",
        f"let {module} load: comment out the modprobe.d lines that blacklist it (a package's "
        f"file is hidden by a copy in {ADMIN_DIR}); the kernel command line is left alone",
        lambda: not in_files(),
        apply,
        undo,
        commands=tuple(
            _planned(b.source, b.where, b.text)
            for b in blacklistings(system, module)
            if not b.on_command_line
        ),
    )


def _planned(source: str, where: str, text: str) -> str:
    if source.startswith(ADMIN_DIR + "/"):
        return f"edit {where}: {MARKER}{text}"
    return f"hide {source} by {ADMIN_DIR}/{source.rsplit('/', 1)[1]} without: {text}"
