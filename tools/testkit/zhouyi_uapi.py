"""The Zhouyi kernel drivers' ioctl ABI, as each line's UAPI header defines it for arm64.

A user-mode driver reaches the KMD only through the ioctl numbers of armchina_aipu.h, and a
number encodes the size of the structure it carries: where two lines' structures differ, the
numbers differ, and a KMD answers a number it does not know with ENOTTY. So the numbers,
computed by the arm64 compiler from each header, are what says which user space can talk to
which KMD. A small C program is generated from a header's own AIPU_IOCTL_* definitions,
compiled with the aarch64 cross compiler and run under qemu-aarch64; it prints one line per
ioctl.
"""

from __future__ import annotations

import hashlib
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import yaml

from pipeline.config import REPO_ROOT, load_package
from pipeline.fetch import cache_root, find_upstream

LINES = Path(__file__).resolve().with_name("zhouyi_lines.yaml")
DRIVER_PAIRS = REPO_ROOT / "npuctl/src/npuctl/platforms/zhouyi/driver_pairs.yaml"
COMPILER = "aarch64-linux-gnu-gcc"
EMULATOR = "qemu-aarch64"
_DEFINITION = re.compile(r"^#define\s+(AIPU_IOCTL_\w+)\s+_IO(?:R|W|WR)?\(", re.MULTILINE)
_DIRECTIONS = {0: "none", 1: "write", 2: "read", 3: "read-write"}


@dataclass(frozen=True)
class Ioctl:
    name: str  # AIPU_IOCTL_QUERY_CAP
    nr: int  # the command's index
    direction: str  # none, read, write, read-write (as the caller sees the copy)
    size: int  # bytes of the argument the number encodes
    number: int  # what the caller passes to ioctl(2)

    @property
    def short(self) -> str:
        return self.name.removeprefix("AIPU_IOCTL_")


def ioctl_names(header: Path) -> list[str]:
    return _DEFINITION.findall(header.read_text(encoding="utf-8"))


def program(header: Path) -> str:
    lines = [
        "#include <stdio.h>",
        "#include <linux/ioctl.h>",
        f'#include "{header.resolve()}"',
        "int main(void) {",
    ]
    for name in ioctl_names(header):
        lines.append(
            f'  printf("%s %u %u %u %lu\\n", "{name}", _IOC_NR({name}), _IOC_DIR({name}), '
            f"_IOC_SIZE({name}), (unsigned long){name});"
        )
    lines += ["  return 0;", "}"]
    return "\n".join(lines) + "\n"


def ioctls(header: Path) -> list[Ioctl]:
    """Every AIPU_IOCTL_* of ``header`` as the arm64 compiler lays it out."""
    with tempfile.TemporaryDirectory(prefix="zhouyi-uapi-") as scratch:
        source, binary = Path(scratch) / "uapi.c", Path(scratch) / "uapi"
        source.write_text(program(header), encoding="utf-8")
        subprocess.run(
            [COMPILER, "-static", "-O0", "-o", str(binary), str(source)],
            check=True,
            capture_output=True,
            text=True,
        )
        output = subprocess.run(
            [EMULATOR, str(binary)], check=True, capture_output=True, text=True
        ).stdout
    found = []
    for line in output.splitlines():
        name, nr, direction, size, number = line.split()
        found.append(Ioctl(name, int(nr), _DIRECTIONS[int(direction)], int(size), int(number)))
    return found


def table(lines: dict[str, list[Ioctl]]) -> str:
    """A Markdown table of every ioctl index: each line's name, size and number, and whether
    a caller of one line reaches the same command in the other."""
    titles = list(lines)
    by_nr = {title: {ioctl.nr: ioctl for ioctl in found} for title, found in lines.items()}
    indexes = sorted({nr for found in by_nr.values() for nr in found})
    header = "| nr | " + " | ".join(titles) + " | the same in all |"
    rows = [header, "|" + "---|" * (len(titles) + 2)]
    for nr in indexes:
        cells = []
        for title in titles:
            ioctl = by_nr[title].get(nr)
            cells.append(f"`{ioctl.short}` {ioctl.size} B `{ioctl.number:#010x}`" if ioctl else "—")
        present = [by_nr[title].get(nr) for title in titles]
        same = all(present) and len({(i.number, i.name) for i in present if i}) == 1
        rows.append(f"| {nr} | " + " | ".join(cells) + f" | {'yes' if same else '**no**'} |")
    return "\n".join(rows) + "\n"


@dataclass(frozen=True)
class PinnedFile:
    """One file of a repository at a commit, verified by its sha256 and cached by it."""

    repository: str
    commit: str
    path: str
    sha256: str

    @property
    def name(self) -> str:
        return Path(self.path).name

    @property
    def cache_path(self) -> Path:
        return cache_root() / "pinned" / self.sha256 / self.name

    def cached(self) -> Path | None:
        target = self.cache_path
        if target.is_file() and hashlib.sha256(target.read_bytes()).hexdigest() == self.sha256:
            return target
        return None


def cache(pinned: PinnedFile, content: bytes) -> Path:
    target = pinned.cache_path
    target.parent.mkdir(parents=True, exist_ok=True)
    incoming = target.with_name(f".{target.name}.incoming")
    incoming.write_bytes(content)
    incoming.rename(target)
    return target


@dataclass(frozen=True)
class Line:
    title: str
    package: str  # the driver package whose pinned tree holds the header, or ""
    header_file: PinnedFile | None  # else the header itself, pinned

    def header(self) -> Path | None:
        """The line's armchina_aipu.h, verified, or None when it is not in the cache."""
        if self.header_file is not None:
            return self.header_file.cached()
        config = load_package(self.package)
        tree = find_upstream(config)
        return None if tree is None else tree / config.upstream.uapi_headers[0]


def lines() -> list[Line]:
    entries = yaml.safe_load(LINES.read_text(encoding="utf-8"))["lines"]
    return [
        Line(
            str(entry["title"]),
            str(entry.get("package", "")),
            None
            if "package" in entry
            else PinnedFile(entry["repository"], entry["commit"], entry["path"], entry["sha256"]),
        )
        for entry in entries
    ]


def umd_deb() -> PinnedFile:
    """libnoe's .deb that driver_pairs.yaml pins, as published in debs/ of aipu-dkms's
    upstream repository at its pinned commit."""
    pairs = yaml.safe_load(DRIVER_PAIRS.read_text(encoding="utf-8"))["pairs"]
    pinned = next(pair for pair in pairs if pair.get("umd_deb_sha256"))
    upstream = load_package("aipu-dkms").upstream
    return PinnedFile(
        upstream.repository, upstream.commit, f"debs/{pinned['umd_deb']}", pinned["umd_deb_sha256"]
    )


def pinned_files() -> list[PinnedFile]:
    """Every file the map needs that no driver package's tree holds."""
    return [umd_deb(), *(line.header_file for line in lines() if line.header_file)]
