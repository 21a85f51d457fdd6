"""The Zhouyi kernel drivers' ioctl ABI, as each line's UAPI header defines it for arm64.

A user-mode driver reaches the KMD only through the ioctl numbers of armchina_aipu.h. A number
encodes the size of the structure it carries, so where a structure's size changes the number
changes and a KMD answers the other line's number with ENOTTY. A structure reordered or
refilled at the same size keeps its number: the KMD accepts the call and reads the fields at
other offsets. So both are compared: the numbers, and every field's offset and size in each
structure an ioctl carries. Small C programs are generated from a header's own AIPU_IOCTL_*
definitions and structures, compiled with the aarch64 cross compiler and run under
qemu-aarch64; they print one line per ioctl, and one per field.
"""

from __future__ import annotations

import hashlib
import itertools
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


def _compiled_output(source: str) -> str:
    """What ``source`` prints, compiled for arm64 and run under qemu-aarch64."""
    with tempfile.TemporaryDirectory(prefix="zhouyi-uapi-") as scratch:
        program_file, binary = Path(scratch) / "uapi.c", Path(scratch) / "uapi"
        program_file.write_text(source, encoding="utf-8")
        subprocess.run(
            [COMPILER, "-static", "-O0", "-o", str(binary), str(program_file)],
            check=True,
            capture_output=True,
            text=True,
        )
        return subprocess.run(
            [EMULATOR, str(binary)], check=True, capture_output=True, text=True
        ).stdout


def ioctls(header: Path) -> list[Ioctl]:
    """Every AIPU_IOCTL_* of ``header`` as the arm64 compiler lays it out."""
    found = []
    for line in _compiled_output(program(header)).splitlines():
        name, nr, direction, size, number = line.split()
        found.append(Ioctl(name, int(nr), _DIRECTIONS[int(direction)], int(size), int(number)))
    return found


# -- the structures the ioctls carry, field by field -------------------------------------------

_CARRIED = re.compile(
    r"^#define\s+(AIPU_IOCTL_\w+)\s+_IO(?:R|W|WR)\(\s*\w+\s*,\s*\d+\s*,\s*([^)]+?)\s*\)",
    re.MULTILINE,
)
_STRUCT = re.compile(r"\bstruct\s+(\w+)\s*\{")


@dataclass(frozen=True)
class Field:
    path: str  # job_id, partition_cap.clusters[0].core_cnt; "" for a scalar argument
    offset: int
    size: int


@dataclass(frozen=True)
class Layout:
    """The structure (or scalar) one ioctl carries, as the arm64 compiler lays it out."""

    ioctl: str  # AIPU_IOCTL_SCHEDULE_JOB
    carried: str  # struct aipu_job_desc
    size: int
    fields: tuple[Field, ...]

    @property
    def short(self) -> str:
        return self.ioctl.removeprefix("AIPU_IOCTL_")


def _plain(header_text: str) -> str:
    """The header without comments and preprocessor lines, continuation lines joined."""
    text = re.sub(r"/\*.*?\*/", " ", header_text, flags=re.DOTALL)
    text = re.sub(r"//[^\n]*", " ", text)
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))


def _closing(text: str, opening: int) -> int:
    """The index of the brace that closes the one at ``opening``."""
    depth = 0
    for index in range(opening, len(text)):
        depth += {"{": 1, "}": -1}.get(text[index], 0)
        if depth == 0:
            return index
    raise ValueError("unbalanced braces in the header")


def _statements(body: str) -> list[str]:
    """A structure body's member declarations (split at top-level semicolons)."""
    statements, depth, start = [], 0, 0
    for index, char in enumerate(body):
        depth += {"{": 1, "}": -1}.get(char, 0)
        if char == ";" and depth == 0:
            statement = " ".join(body[start:index].split())
            if statement:
                statements.append(statement)
            start = index + 1
    return statements


def _definitions(text: str) -> dict[str, str]:
    """Every struct tag of the header (top level or nested) -> its body."""
    bodies = {}
    for match in _STRUCT.finditer(text):
        opening = match.end() - 1
        bodies[match[1]] = text[opening + 1 : _closing(text, opening)]
    return bodies


def _member_paths(body: str, bodies: dict[str, str], prefix: str = "") -> list[str]:
    """The C member designators of a structure body, the structure members and their own."""
    paths = []
    for statement in _statements(body):
        inner = None
        if "{" in statement:
            opening = statement.index("{")
            closing = _closing(statement, opening)
            kind = statement[:opening].split()[0]
            inner = statement[opening + 1 : closing] if kind in ("struct", "union") else None
            declarator = statement[closing + 1 :].strip()
        else:
            declarator = statement.split()[-1]
            tag = re.match(r"(?:const\s+)?struct\s+(\w+)\s", statement)
            if tag and "*" not in statement and tag[1] in bodies:
                inner = bodies[tag[1]]
        name = re.match(r"\**\s*(\w+)", declarator)
        if name is None:
            raise ValueError(f"cannot read the member declaration '{statement}'")
        path = prefix + name[1]
        paths.append(path)
        if inner is not None:
            element = f"{path}[0]" if "[" in declarator else path
            paths += _member_paths(inner, bodies, f"{element}.")
    return paths


def layout_program(header: Path) -> str:
    text = _plain(header.read_text(encoding="utf-8"))
    raw = header.read_text(encoding="utf-8").replace("\\\n", " ")
    bodies = _definitions(text)
    lines = [
        "#include <stdio.h>",
        "#include <stddef.h>",
        "#include <linux/ioctl.h>",
        f'#include "{header.resolve()}"',
        "int main(void) {",
    ]
    for name, carried in _CARRIED.findall(raw):
        carried = " ".join(carried.split())
        lines.append(
            f'  printf("%s\\t%s\\t\\t0\\t%zu\\n", "{name}", "{carried}", sizeof({carried}));'
        )
        tag = re.fullmatch(r"struct (\w+)", carried)
        for path in _member_paths(bodies[tag[1]], bodies) if tag else []:
            lines.append(
                f'  printf("%s\\t%s\\t%s\\t%zu\\t%zu\\n", "{name}", "{carried}", "{path}", '
                f"offsetof({carried}, {path}), sizeof((({carried} *)0)->{path}));"
            )
    lines += ["  return 0;", "}"]
    return "\n".join(lines) + "\n"


def layouts(header: Path) -> list[Layout]:
    """The structure every AIPU_IOCTL_* of ``header`` carries, field by field, for arm64."""
    carried: dict[str, tuple[str, int, list[Field]]] = {}
    for line in _compiled_output(layout_program(header)).splitlines():
        name, kind, path, offset, size = line.split("\t")
        if not path:
            carried[name] = (kind, int(size), [])
        else:
            carried[name][2].append(Field(path, int(offset), int(size)))
    return [
        Layout(name, kind, size, tuple(fields)) for name, (kind, size, fields) in carried.items()
    ]


def layout_changes(before: Layout, after: Layout) -> list[str]:
    """How ``after`` differs from ``before``, field by field ([] when laid out alike)."""
    old = {field.path: field for field in before.fields}
    new = {field.path: field for field in after.fields}
    changes = []
    if before.size != after.size:
        changes.append(f"size {before.size} → {after.size}")
    for path, field in new.items():
        was = old.get(path)
        if was is None:
            changes.append(f"+`{path}` @{field.offset}")
        elif (was.offset, was.size) != (field.offset, field.size):
            moved = f"@{was.offset} → {field.offset}" if was.offset != field.offset else ""
            resized = f"{was.size} → {field.size} B" if was.size != field.size else ""
            changes.append(f"`{path}` " + ", ".join(part for part in (moved, resized) if part))
    changes += [f"-`{path}`" for path in old if path not in new]
    return changes


def _shape(layout: Layout) -> tuple[tuple[int, int], ...]:
    """Where the fields are, whatever their names: what the two sides of an ioctl agree on."""
    return (
        (0, layout.size),
        *sorted({(field.offset, field.size) for field in layout.fields}),
    )


def _top_level(changes: list[str]) -> list[str]:
    """The changes without those of nested members (a moved structure moves its fields)."""
    return [change for change in changes if not re.search(r"`[^`]*[.\[][^`]*`", change)]


def layout_table(lines: dict[str, list[Layout]], numbers: dict[str, list[Ioctl]]) -> str:
    """A Markdown table of every structure an ioctl carries: its size in the first line, and
    how each line's layout differs from the line before it; where the number stayed and the
    layout did not, the cell says so first."""
    titles = list(lines)
    by_name = {title: {layout.ioctl: layout for layout in found} for title, found in lines.items()}
    number_of = {
        title: {ioctl.name: ioctl.number for ioctl in found} for title, found in numbers.items()
    }
    names = list(dict.fromkeys(name for found in lines.values() for name in
                               (layout.ioctl for layout in found)))  # fmt: skip
    header = (
        f"| ioctl | carries | {titles[0]} | "
        + " | ".join(f"{title} against {before}" for before, title in itertools.pairwise(titles))
        + " |"
    )
    rows = [header, "|" + "---|" * (len(titles) + 2)]
    for name in sorted(names, key=lambda n: min(
            i.nr for found in numbers.values() for i in found if i.name == n)):  # fmt: skip
        first = next(by_name[title][name] for title in titles if name in by_name[title])
        cells = []
        for index, title in enumerate(titles):
            layout = by_name[title].get(name)
            if layout is None:
                cells.append("—")
                continue
            if index == 0:
                cells.append(f"{layout.size} B")
                continue
            before = by_name[titles[index - 1]].get(name)
            if before is None:
                cells.append(f"new, {layout.size} B")
                continue
            every = layout_changes(before, layout)
            changes = _top_level(every) or every
            if not changes:
                cells.append("same")
                continue
            if _shape(before) == _shape(layout):
                cells.append("same layout, renamed: " + ", ".join(changes))
                continue
            same_number = number_of[titles[index - 1]].get(name) == number_of[title].get(name)
            warning = "**same number, other layout**: " if same_number else ""
            cells.append(warning + ", ".join(changes))
        rows.append(f"| `{first.short}` | `{first.carried}` | " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"


def incompatible_at_the_same_number(before: list[Layout], after: list[Layout],
                                    numbers_before: list[Ioctl],
                                    numbers_after: list[Ioctl]) -> list[str]:  # fmt: skip
    """The ioctls two lines number alike whose structures are laid out differently: a caller
    of one line reaches the other's KMD, which reads other fields."""
    old = {layout.ioctl: layout for layout in before}
    number_before = {ioctl.name: ioctl.number for ioctl in numbers_before}
    found = []
    for layout in after:
        was = old.get(layout.ioctl)
        same_number = number_before.get(layout.ioctl) == next(
            ioctl.number for ioctl in numbers_after if ioctl.name == layout.ioctl
        )
        if was is not None and same_number and _shape(was) != _shape(layout):
            found.append(layout.short)
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


def same_number_list(lines: dict[str, list[Layout]], numbers: dict[str, list[Ioctl]]) -> str:
    """A Markdown list: for each line against the line before it, the ioctls whose number
    stayed while their structure's layout changed."""
    titles = list(lines)
    items = []
    for before, after in itertools.pairwise(titles):
        found = incompatible_at_the_same_number(
            lines[before], lines[after], numbers[before], numbers[after]
        )
        named = ", ".join(f"`{short}`" for short in found) or "none"
        items.append(f"- {after} against {before}: {named}")
    return "\n".join(items) + "\n"


def kmd_version(title: str) -> str:
    """'6.1.0' of 'Compass 4.2.0 (KMD 6.1.0, aipu-compass-dkms)', '5.11' of 'CIX 5.11 (...)'."""
    match = re.search(r"KMD (\d+\.\d+(?:\.\d+)?)", title) or re.search(r"(\d+\.\d+)", title)
    return match[1] if match else ""


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
