"""A peer's hardware-validated suite on the emulated board (emulation/rk3588.yaml:
peer_suite): librocketnpu at the pinned commit (its tree id checked), built for arm64 with
Debian's cross compiler, statically, against the pinned Debian headers (libdrm's and the
kernel's rocket UAPI), the library as its CMakeLists lists it and each pinned gate linked
to it. Cached by the pins: the gates' programs, their fixtures and gates.json, which the
board runs from /lab/cases/peer."""

from __future__ import annotations

import json
import re
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pipeline.errors import BuildError
from pipeline.fetch import pinned_debs
from pipeline.tools import run

from .errors import EmulationError, ExitCode, Stage
from .pins import Pins, digest
from .sources import _git, cache, git_dir, unpack_tree

COMPILER = "aarch64-linux-gnu-gcc"  # make deps: gcc-aarch64-linux-gnu
ARCHIVER = "aarch64-linux-gnu-ar"
BOARD_FOLDER = "/lab/cases/peer"  # where the board finds this folder (tools/rocket_emu/guest)
FIXTURES = "tests/data/teflon-dw-capture"  # replay_dw_mesa's captured buffers
FLAGS = ["-std=gnu11", "-O2", "-w"]
LIBRARY_LIST = re.compile(r"set\(ROCKETNPU_SOURCES(.*?\.c)\)", re.DOTALL)


def folder(pins: Pins) -> Path:
    """Keyed by what the build reads: the source, the headers, the gates' names, the flags."""
    peer = pins.data["peer_suite"]
    built = [
        peer["commit"],
        peer["tree_id"],
        peer["headers"],
        [gate["name"] for gate in peer["gates"]],
    ]
    return cache() / f"peer-{digest(*built, FLAGS, BOARD_FOLDER)}"


def cached(pins: Pins) -> Path | None:
    found = folder(pins)
    return found if (found / "gates.json").is_file() else None


def build(pins: Pins, repository: Path | None) -> Path | None:
    """The built gates' folder; None where they are neither cached nor a clone given (the
    gates are then left out of the run)."""
    found = cached(pins)
    if found is not None:
        return found
    if repository is None:
        return None
    peer = pins.data["peer_suite"]
    target = folder(pins)
    work = target.with_name(target.name + ".partial")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    try:
        tree = _source_tree(peer, repository, work / "source")
        include = _debian_headers(peer, work / "headers")
        library = _library(tree, include, work / "objects")
        output = work / "out"
        (output / "bin").mkdir(parents=True)
        for gate in peer["gates"]:
            _compile(
                [
                    f'-DTEFLON_DW_CAPTURE_DIR="{BOARD_FOLDER}/teflon-dw-capture"',
                    tree / "tests" / f"{gate['name']}.c",
                    library,
                    "-static",
                    "-lpthread",
                    "-lm",
                    "-o",
                    output / "bin" / gate["name"],
                ],
                tree,
                include,
                f"linking {gate['name']}",
            )
        shutil.copytree(tree / FIXTURES, output / "teflon-dw-capture")
        gates = [{"name": gate["name"], "program": f"bin/{gate['name']}"} for gate in peer["gates"]]
        (output / "gates.json").write_text(json.dumps(gates), encoding="utf-8")
    except BuildError as error:
        shutil.rmtree(work, ignore_errors=True)
        if isinstance(error, EmulationError):
            raise
        raise EmulationError(Stage.INPUTS, str(error), ExitCode.BUILD) from None
    shutil.rmtree(target, ignore_errors=True)
    (work / "out").replace(target)
    shutil.rmtree(work, ignore_errors=True)
    return target


def _source_tree(peer: dict, repository: Path, into: Path) -> Path:
    """The peer's tree at the pinned commit, refused unless it is the pinned tree."""
    git = git_dir(repository)
    found = _git(git, "rev-parse", f"{peer['commit']}^{{tree}}")
    if found.returncode != 0 or found.stdout.decode().strip() != peer["tree_id"]:
        raise EmulationError(
            Stage.INPUTS,
            f"{repository} has no commit {peer['commit']} with tree {peer['tree_id']}",
            ExitCode.INPUT,
        )
    into.mkdir(parents=True)
    unpack_tree(git, peer["commit"], into)
    return into


def _debian_headers(peer: dict, into: Path) -> Path:
    """An include folder with Debian's drm/ and libdrm/ (the pinned .debs unpacked), and the
    rest of the newer kernel headers to fall back on after the cross compiler's own."""
    try:
        debs = pinned_debs(peer["headers"], "emulation/rk3588.yaml: peer_suite")
    except BuildError as error:
        raise EmulationError(Stage.INPUTS, str(error), ExitCode.INPUT) from None
    unpacked = into / "root"
    unpacked.mkdir(parents=True)
    for deb in debs:
        run(["dpkg-deb", "-x", deb, unpacked], failure=f"unpacking {deb.name}")
    include = into / "include"
    include.mkdir()
    for name in ("drm", "libdrm"):
        (include / name).symlink_to(unpacked / "usr" / "include" / name)
    return include


def library_sources(tree: Path) -> list[str]:
    """The library's sources as the peer's CMakeLists lists them (ROCKETNPU_SOURCES)."""
    found = LIBRARY_LIST.search((tree / "CMakeLists.txt").read_text(encoding="utf-8"))
    if found is None:
        raise EmulationError(
            Stage.INPUTS, "the peer's CMakeLists.txt lists no ROCKETNPU_SOURCES", ExitCode.INPUT
        )
    return re.findall(r"^\s*(src/[A-Za-z0-9_]+\.c)", found.group(1) + "\n", re.MULTILINE)


def _library(tree: Path, include: Path, objects: Path) -> Path:
    objects.mkdir()
    sources = library_sources(tree)

    def compile_one(source: str) -> Path:
        target = objects / f"{Path(source).stem}.o"
        _compile(["-c", tree / source, "-o", target], tree, include, f"compiling {source}")
        return target

    with ThreadPoolExecutor(2) as compilers:
        built = list(compilers.map(compile_one, sources))
    library = objects / "librocketnpu.a"
    run([ARCHIVER, "rcs", library, *built], failure="archiving librocketnpu")
    return library


def _compile(arguments: list, tree: Path, include: Path, failure: str) -> None:
    run(
        [
            COMPILER, *FLAGS, "-I", tree / "include", "-I", include,
            "-idirafter", include.parent / "root" / "usr" / "include", *arguments,
        ],
        cwd=tree,
        failure=failure,
    )  # fmt: skip
