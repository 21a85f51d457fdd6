"""The pinned sources: Debian's QEMU source package (its .dsc by sha256, the tarballs by the
.dsc's checksums, which dpkg-source checks), the Teflons' .debs by their checksums, Mesa's
Teflon test models out of Debian's orig tarball of Mesa (the tarball and each member by
sha256), and the emulator's files from a local mirror or clone of its repository, at the
pinned commit whose folder must have the pinned tree id."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

from oci_image.rootfs import mirror
from pipeline.errors import BuildError
from pipeline.fetch import cache_root, download, pinned_debs, pinned_debs_cached, sha256_of
from pipeline.tools import run

from .errors import EmulationError, ExitCode, Stage
from .pins import Pins


def cache() -> Path:
    folder = cache_root() / "rocket-emu"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _download(url: str, target: Path, sha256: str | None = None) -> None:
    try:
        download(url, target, sha256, "emulation/rk3588.yaml")
    except BuildError as error:
        raise EmulationError(Stage.INPUTS, str(error), ExitCode.INPUT) from None


def qemu_source(pins: Pins, work: Path) -> Path:
    """Debian's QEMU source, unpacked (Debian's patches applied) into ``work``."""
    qemu = pins.qemu
    folder = cache() / "qemu-source"
    folder.mkdir(exist_ok=True)
    dsc = folder / qemu["dsc"]
    base = f"{mirror()}/{qemu['pool']}"
    if not dsc.exists() or sha256_of(dsc) != qemu["dsc_sha256"]:
        _download(f"{base}/{qemu['dsc']}", dsc, qemu["dsc_sha256"])
    files = [
        line.split()[2]
        for line in dsc.read_text(encoding="utf-8").split("Checksums-Sha256:")[1].splitlines()
        if line.startswith(" ") and len(line.split()) == 3
    ]
    for name in files:
        if not (folder / name).exists():
            _download(f"{base}/{name}", folder / name)
    tree = work / "qemu-src"
    shutil.rmtree(tree, ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)
    result = run(
        ["dpkg-source", "--require-strong-checksums", "-x", dsc, tree],
        check=False,
        failure="dpkg-source",
    )
    if result.returncode != 0:
        raise EmulationError(
            Stage.INPUTS,
            f"dpkg-source could not unpack {qemu['dsc']}: {result.stderr.strip()[-200:]}",
            ExitCode.INPUT,
        )
    shutil.rmtree(tree / ".pc", ignore_errors=True)  # Debian's series stays applied
    return tree


def _git(repository: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    return run(
        ["git", "--git-dir", repository, *args], check=False, text=False, failure=f"git {args[0]}"
    )


def git_dir(path: Path) -> Path:
    return path / ".git" if (path / ".git").exists() else path


def emulator_files(pins: Pins, repository: Path | None) -> Path:
    """The files of the emulator's folder at the pinned commit (its contents at the top),
    cached by its tree id."""
    emulator = pins.emulator
    target = cache() / f"emulator-{emulator['tree_id']}"
    if target.is_dir():
        return target
    if repository is None:
        raise EmulationError(
            Stage.INPUTS,
            f"the emulator's sources are not cached: give a clone of {emulator['repository']} "
            "as EMULATOR_GIT",
            ExitCode.INPUT,
        )
    git = git_dir(repository)
    spec = f"{emulator['commit']}:{emulator['folder']}"
    tree = _git(git, "rev-parse", spec)
    if tree.returncode != 0:
        raise EmulationError(
            Stage.INPUTS, f"{repository} has no commit {emulator['commit']}", ExitCode.INPUT
        )
    if tree.stdout.decode().strip() != emulator["tree_id"]:
        raise EmulationError(
            Stage.INPUTS,
            f"{spec} in {repository} is tree {tree.stdout.decode().strip()}, not the pinned "
            f"{emulator['tree_id']}",
            ExitCode.INPUT,
        )
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir()
    unpack_tree(git, spec, partial)
    partial.replace(target)
    return target


def unpack_tree(git: Path, spec: str, into: Path) -> None:
    """The files of a tree (``commit`` or ``commit:folder``) of a git directory, into a folder
    that exists."""
    archive = run(
        ["git", "--git-dir", git, "archive", "--format=tar", spec],
        text=False,
        failure=f"git archive {spec}",
    )
    run(
        ["tar", "-x", "-C", into],
        input_data=archive.stdout,
        text=False,
        failure=f"unpacking {spec}",
    )


def teflon_debs(teflon: dict) -> list[Path]:
    """A Teflon build's .debs (the family's user-space description), from the Debian mirror
    once and checked against their checksums, cached."""
    try:
        return pinned_debs(teflon["debs"], "the rocket family's teflon.yaml")
    except BuildError as error:
        raise EmulationError(Stage.INPUTS, str(error), ExitCode.INPUT) from None


def teflon_debs_cached(teflon: dict) -> bool:
    return pinned_debs_cached(teflon["debs"])


def frigate_files(pins: Pins, repository: Path | None, pinned: str = "frigate") -> Path:
    """Frigate's pinned files of one set (``pinned``: frigate, frigate_genai), by their blob
    ids at the pinned commit, each by its name in one folder, cached by the ids."""
    frigate = pins.data[pinned]
    target = frigate_cache(pins, pinned)
    if target.is_dir():
        return target
    if repository is None:
        raise EmulationError(
            Stage.INPUTS,
            f"Frigate's files are not cached: give a clone of {frigate['repository']} as "
            "FRIGATE_GIT",
            ExitCode.INPUT,
        )
    git = git_dir(repository)
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    for path, blob in frigate["files"].items():
        found = _git(git, "rev-parse", f"{frigate['commit']}:{path}")
        if found.returncode != 0 or found.stdout.decode().strip() != blob:
            raise EmulationError(
                Stage.INPUTS,
                f"{frigate['commit']}:{path} in {repository} is not the pinned blob {blob}",
                ExitCode.INPUT,
            )
        (partial / Path(path).name).write_bytes(_git(git, "cat-file", "blob", blob).stdout)
    partial.replace(target)
    return target


def frigate_cache(pins: Pins, pinned: str = "frigate") -> Path:
    blobs = sorted(pins.data[pinned]["files"].values())
    return cache() / f"frigate-{hashlib.sha256(''.join(blobs).encode()).hexdigest()[:16]}"


def published_files(pins: Pins, repository: Path | None) -> Path | None:
    """The published models and photograph (Coral's test data), each by its name in one
    folder, checked against the pinned commit, blob ids and checksums, cached by them; None
    where they are neither cached nor given (the published cases are then left out)."""
    published = pins.data["published"]
    target = published_cache(pins)
    if target.is_dir():
        return target
    if repository is None:
        return None
    git = git_dir(repository)
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    for name, pinned in published["files"].items():
        found = _git(git, "rev-parse", f"{published['commit']}:{name}")
        data = _git(git, "cat-file", "blob", pinned["blob"]).stdout
        if (
            found.returncode != 0
            or found.stdout.decode().strip() != pinned["blob"]
            or hashlib.sha256(data).hexdigest() != pinned["sha256"]
        ):
            raise EmulationError(
                Stage.INPUTS,
                f"{published['commit']}:{name} in {repository} is not the pinned blob "
                f"{pinned['blob']} with sha256 {pinned['sha256']}",
                ExitCode.INPUT,
            )
        (partial / name).write_bytes(data)
    partial.replace(target)
    return target


def published_cache(pins: Pins) -> Path:
    sums = sorted(pinned["sha256"] for pinned in pins.data["published"]["files"].values())
    return cache() / f"published-{hashlib.sha256(''.join(sums).encode()).hexdigest()[:16]}"


def mesa_test_files(pins: Pins) -> Path:
    """Mesa's Teflon test models (emulation/rk3588.yaml: mesa_tests), each by its name in one
    folder: Debian's orig tarball of Mesa from the archive once (kept only when its sha256 is
    the pinned one), the pinned members alone unpacked from it, each checked by its sha256;
    cached by the checksums."""
    pinned = pins.data["mesa_tests"]
    target = mesa_tests_cache(pins)
    if target.is_dir():
        return target
    tarball = cache_root() / "sources" / pinned["tarball"]
    if not tarball.is_file() or sha256_of(tarball) != pinned["sha256"]:
        _download(f"{mirror()}/{pinned['pool']}/{pinned['tarball']}", tarball, pinned["sha256"])
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    folder = pinned["folder"].strip("/")
    try:
        run(
            [
                "tar", "-xf", tarball, "-C", partial, "--no-same-owner",
                f"--strip-components={folder.count('/') + 1}",
                *(f"{folder}/{name}" for name in pinned["files"]),
            ],
            failure=f"{pinned['tarball']} lacks some of the pinned members of {folder}/",
            code=ExitCode.INPUT,
        )  # fmt: skip
    except BuildError as error:
        shutil.rmtree(partial, ignore_errors=True)
        raise EmulationError(Stage.INPUTS, str(error), ExitCode.INPUT) from None
    for name, sha256 in pinned["files"].items():
        found = sha256_of(partial / name)
        if found != sha256:
            shutil.rmtree(partial, ignore_errors=True)
            raise EmulationError(
                Stage.INPUTS,
                f"{folder}/{name} in {pinned['tarball']} has sha256 {found}, but "
                f"emulation/rk3588.yaml pins {sha256}",
                ExitCode.INPUT,
            )
    partial.replace(target)
    return target


# Why a test that needs Mesa's test models skips where they are not cached.
NOT_MESA_TESTS = (
    "Mesa's test models are not cached: make check-rocket-emu (it fetches Debian's orig "
    "tarball of Mesa from the archive)"
)


def mesa_tests_cache(pins: Pins) -> Path:
    sums = "".join(sorted(pins.data["mesa_tests"]["files"].values()))
    return cache() / f"mesa-tests-{hashlib.sha256(sums.encode()).hexdigest()[:16]}"
