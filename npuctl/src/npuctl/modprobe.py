"""Where modprobe is told not to load a module: 'blacklist' and 'install ... /bin/false'
lines in the configuration files modprobe really reads, and the kernel command line's
module_blacklist= and modprobe.blacklist=.

modprobe.d(5): the folders below, in this order of precedence; a file of one name is read
from the first folder that has it, so /etc/modprobe.d/x.conf hides /usr/lib/modprobe.d/x.conf
(that is also how a blacklist shipped by a package is lifted without editing its file)."""

from __future__ import annotations

from dataclasses import dataclass

from .system import System

MODPROBE_DIRS = (
    "/etc/modprobe.d",
    "/run/modprobe.d",
    "/usr/local/lib/modprobe.d",
    "/usr/lib/modprobe.d",
    "/lib/modprobe.d",
)
ADMIN_DIR = MODPROBE_DIRS[0]
# 'install <module> <command>' with one of these commands makes every load a no-op.
REFUSING_COMMANDS = {"/bin/false", "/bin/true", "/usr/bin/false", "/usr/bin/true", "false", "true"}
COMMAND_LINE_PARAMETERS = ("module_blacklist", "modprobe.blacklist")


@dataclass(frozen=True)
class Blacklisting:
    source: str  # the file, or "/proc/cmdline"
    line_number: int  # 0 on the kernel command line
    text: str  # the line or the parameter as written

    @property
    def on_command_line(self) -> bool:
        return self.source == "/proc/cmdline"

    @property
    def where(self) -> str:
        return self.source if self.on_command_line else f"{self.source}:{self.line_number}"


def same_module(left: str, right: str) -> bool:
    """kmod treats '-' and '_' in module names alike."""
    return left.replace("-", "_") == right.replace("-", "_")


def configuration_files(system: System) -> list[str]:
    """The .conf files modprobe reads, each name from the folder that wins, in name order."""
    chosen: dict[str, str] = {}
    for folder in MODPROBE_DIRS:
        for name in system.listdir(folder):
            if name.endswith(".conf") and name not in chosen:
                chosen[name] = f"{folder}/{name}"
    return [chosen[name] for name in sorted(chosen)]


def refuses(line: str, module: str) -> bool:
    """Whether one modprobe.d line keeps ``module`` from loading."""
    words = line.split("#", 1)[0].split()
    if len(words) >= 2 and words[0] == "blacklist":
        return same_module(words[1], module)
    if len(words) >= 3 and words[0] == "install" and same_module(words[1], module):
        return " ".join(words[2:]) in REFUSING_COMMANDS
    return False


def lines_of(system: System, absolute: str) -> list[str]:
    """A file's lines as written (line numbers count from its first line)."""
    try:
        return system.path(absolute).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []


def blacklistings(system: System, module: str) -> list[Blacklisting]:
    found = []
    for path in configuration_files(system):
        for number, line in enumerate(lines_of(system, path), start=1):
            if refuses(line, module):
                found.append(Blacklisting(path, number, line.strip()))
    for parameter in (system.read("/proc/cmdline") or "").split():
        name, _, value = parameter.partition("=")
        if name in COMMAND_LINE_PARAMETERS and any(
            same_module(item, module) for item in value.split(",")
        ):
            found.append(Blacklisting("/proc/cmdline", 0, parameter))
    return found
