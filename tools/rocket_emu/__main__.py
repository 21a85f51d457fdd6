"""python -m rocket_emu prepare --dist DIST --work WORK [--emulator-git PATH] [--frigate-git
PATH] [--coral-git PATH] [--peer-git PATH]: build (or find cached) QEMU with the Orange Pi 5
Plus machine and the board's root file system, the pinned files of Frigate the board runs, the
published models it runs as Mesa's tests do (Coral's test data, left out and said where not
given; Mesa's own test models, from Debian's orig tarball of Mesa in the archive) and a peer's
hardware-validated gates, built for arm64 (left out and said where not given).
python -m rocket_emu cached --dist DIST: exit 0 when both are cached, else say what is not.
python -m rocket_emu frigate --frigate-git PATH: cache every pinned set of Frigate's files (the
board's, and the GenAI client npuctl serve's tests run).

Exit codes: 0 ready, 2 usage, 3 a pinned input missing or not matching, 4 a build failed."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from oci_image import workspace
from pipeline.errors import BuildError

from . import guest_root, peer_suite, qemu_build, sources
from .errors import EmulationError
from .pins import load

FRIGATE_SETS = ("frigate", "frigate_genai")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rocket_emu")
    commands = parser.add_subparsers(dest="command", required=True)
    prepare = commands.add_parser("prepare", help="build QEMU and the guest (cached)")
    prepare.add_argument("--dist", type=Path, required=True)
    prepare.add_argument("--work", type=Path, required=True)
    prepare.add_argument("--emulator-git", type=Path, default=None)
    prepare.add_argument("--frigate-git", type=Path, default=None)
    prepare.add_argument("--coral-git", type=Path, default=None)
    prepare.add_argument("--peer-git", type=Path, default=None)
    frigate = commands.add_parser("frigate", help="cache Frigate's pinned files")
    frigate.add_argument("--frigate-git", type=Path, required=True)
    cached = commands.add_parser("cached", help="exit 0 when a run needs no build")
    cached.add_argument("--dist", type=Path, required=True)
    args = parser.parse_args(argv)
    try:
        pins = load()
        if args.command == "cached":
            reason = missing_from_cache(args.dist)
            print(reason or "cached: QEMU and the guest root file system")
            return 0 if reason is None else 1
        if args.command == "frigate":
            for pinned in FRIGATE_SETS:
                print(f"{pinned}: {sources.frigate_files(pins, args.frigate_git, pinned)}")
            return 0
        started = time.monotonic()
        emulator = sources.emulator_files(pins, args.emulator_git)
        for pinned in FRIGATE_SETS:
            sources.frigate_files(pins, args.frigate_git, pinned)
        if sources.published_files(pins, args.coral_git) is None:
            print(
                "published models: not cached and no CORAL_GIT given: the published cases "
                "are left out of the run"
            )
        print(f"Mesa's test models: {sources.mesa_test_files(pins)}")
        peer = peer_suite.build(pins, args.peer_git)
        print(
            f"the peer's gates: {peer}"
            if peer is not None
            else "the peer's gates: not built and no PEER_GIT given: they are left out of the run"
        )
        qemu = qemu_build.build(pins, emulator, args.work)
        print(f"QEMU: {qemu} ({round(time.monotonic() - started, 1)} s)")
        started = time.monotonic()
        guest = guest_root.build(pins, emulator, args.dist, args.work)
        print(f"guest: {guest.folder} ({round(time.monotonic() - started, 1)} s)")
    except BuildError as error:  # an EmulationError, or a program that failed or hung
        print(f"rocket-emu: {error}", file=sys.stderr)
        return int(error.code)
    except (KeyboardInterrupt, workspace.Stopped) as stopped:
        return workspace.said_stop("rocket-emu", stopped)
    return 0


def missing_from_cache(dist: Path | None) -> str | None:
    """None when QEMU, the emulator's files and the guest for this dist's .debs are all
    cached (without a dist, QEMU and the emulator's files only); else why not."""
    pins = load()
    emulator = sources.cache() / f"emulator-{pins.emulator['tree_id']}"
    if not emulator.is_dir():
        return "the emulator's sources are not cached: run 'make check-rocket-emu' once"
    if not qemu_build.cached_binary(pins, emulator).is_file():
        return "QEMU with the Orange Pi 5 Plus machine is not built: run 'make check-rocket-emu'"
    if not sources.frigate_cache(pins).is_dir():
        return "Frigate's files are not cached: run 'make check-rocket-emu' once"
    if not all(sources.teflon_debs_cached(teflon) for teflon in pins.teflons):
        return "the pinned Teflons' .debs are not cached: run 'make check-rocket-emu'"
    if dist is None:
        return None
    try:
        key = guest_root.cache_key(pins, dist)
    except EmulationError as error:
        return str(error)
    if not guest_root.GuestRoot(sources.cache() / f"guest-{key}").initrd.is_file():
        return (
            "no guest root file system for this rocket-dkms .deb is cached: "
            "run 'make check-rocket-emu'"
        )
    return None


if __name__ == "__main__":
    workspace.stop_on_signals()
    sys.exit(main())
