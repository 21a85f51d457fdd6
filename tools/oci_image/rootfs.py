"""The image's root file system: mmdebstrap from Debian's archive with this project's .debs
installed by apt as on a board, then the pinned wheels; each precondition checked first so a
missing one is one line, not a half-built tree."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import arm64_emulation
from pipeline.config import debian_mirror, load_package, package_names
from pipeline.errors import BuildError
from pipeline.fetch import pinned_debs
from pipeline.tools import run

from . import workspace
from .definition import Definition
from .errors import ExitCode, ImageError

PIP_PLATFORMS = {"arm64": "manylinux_2_27_aarch64", "amd64": "manylinux_2_27_x86_64"}
HOST_ARCHITECTURES = {"x86_64": "amd64", "aarch64": "arm64"}
# Documentation and translations are not needed to serve; the copyright files stay (licences).
# glibc's iconv modules (20 MB) convert legacy character sets, which nothing in the image
# does: Python's codecs are its own and UTF-8 is built into glibc.
DPKG_OPTIONS = (
    "path-exclude=/usr/lib/*/gconv/*",
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/info/*",
    "path-exclude=/usr/share/locale/*",
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
    "path-exclude=/usr/share/lintian/*",
)
FILE_MIRROR_HOOK = Path("/usr/share/mmdebstrap/hooks/file-mirror-automount")


def mirror() -> str:
    return debian_mirror()


def check_emulation(architecture: str) -> None:
    """A foreign root file system runs its maintainer scripts through binfmt_misc, and
    mmdebstrap asks arch-test whether it can."""
    if HOST_ARCHITECTURES.get(platform.machine()) == architecture:
        return
    if architecture != "arm64":
        raise ImageError(f"cannot build {architecture} images on this machine", ExitCode.USAGE)
    if found := arm64_emulation.missing():
        raise ImageError(found.line(), ExitCode.TOOL)
    tool("arch-test", "arch-test")


def check_archive(suites: tuple[str, ...], timeout: float = 20) -> None:
    for suite in suites:
        url = f"{mirror()}/dists/{suite}/InRelease"
        try:
            with urllib.request.urlopen(url, timeout=timeout) as answer:
                answer.read(1)
        except (urllib.error.URLError, OSError, ValueError) as error:
            reason = getattr(error, "reason", None) or error
            raise ImageError(
                f"cannot reach Debian's archive at {url} ({reason}); is the network up? "
                "(DEBIAN_MIRROR names another mirror)",
                ExitCode.ARCHIVE,
            ) from None


def local_debs(definition: Definition, dist: Path, version: str) -> list[Path]:
    debs = [dist / f"{name}_{version}_all.deb" for name in definition.debs]
    missing = [deb for deb in debs if not deb.is_file()]
    if missing:
        raise ImageError(
            f"{missing[0]} is missing: build the packages first ('make deb')", ExitCode.INPUT
        )
    return [deb.resolve() for deb in debs]


def user_space_debs(definition: Definition, architecture: str) -> list[Path]:
    """The user space each of the image's families wants (its driver description's
    user_space: the wanted build's .debs, pinned by checksum), for the architectures Debian
    built it for; none unless the image asks for it."""
    if not definition.user_space:
        return []
    found: list[Path] = []
    for package in package_names():
        config = load_package(package)
        wanted = config.wanted_user_space()
        if config.npuctl_platform not in definition.families or wanted is None:
            continue
        debs = wanted.debs
        if not any(deb["file"].endswith(f"_{architecture}.deb") for deb in debs):
            continue  # not built for this architecture: a delegate comes by CDI
        try:
            found += pinned_debs(debs, wanted.described_in)
        except BuildError as error:
            raise ImageError(str(error), ExitCode.INPUT) from None
    return found


def tool(name: str, package: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise ImageError(f"{name} is not installed: sudo apt install {package}", ExitCode.TOOL)
    return found


def _sources(definition: Definition, architecture: str) -> list[str]:
    return [f"deb {mirror()} {suite} main" for suite in definition.suites_for(architecture)]


def debootstrap(
    definition: Definition, architecture: str, debs: list[Path], root: Path, epoch: int, log: Path
) -> None:
    """mmdebstrap into ``root`` (which must not exist)."""
    command = [
        tool("mmdebstrap", "mmdebstrap"),
        "--mode=auto",
        "--variant=essential",
        f"--arch={architecture}",
        "--format=directory",
        *(f"--dpkgopt={option}" for option in DPKG_OPTIONS),
        *(f"--include={deb}" for deb in debs),
        *(f"--include={package}" for package in definition.packages_for(architecture)),
        f"--hook-dir={FILE_MIRROR_HOOK}",
        '--aptopt=Acquire::Retries "3"',
        definition.suite,
        str(root),
        *_sources(definition, architecture),
    ]
    environment = arm64_emulation.environment(
        {**os.environ, "SOURCE_DATE_EPOCH": str(epoch), "LC_ALL": "C.UTF-8"}
    )
    with log.open("w", encoding="utf-8") as output:
        returncode = workspace.run_group(
            command, stdout=output, stderr=subprocess.STDOUT, env=environment
        )
    if returncode != 0:
        raise ImageError(
            f"mmdebstrap failed for {definition.name} ({architecture}): see {log}",
            ExitCode.BUILD,
        )


def python_version(root: Path) -> str:
    """The image's Python as pip names it (3.13)."""
    found = sorted(root.glob("usr/lib/python3.*/os.py"))
    if not found:
        raise ImageError(f"no Python in the image's {root}", ExitCode.BUILD)
    return found[-1].parent.name.removeprefix("python")


def install_wheels(definition: Definition, architecture: str, root: Path, log: Path) -> None:
    """pip of this machine installs the pinned wheels for the image's Python and architecture
    (no pip in the image, no emulation needed), without dependencies: Debian's serve those."""
    if definition.wheels is None:
        return
    version = python_version(root)
    target = root / definition.wheels.target.lstrip("/")
    command = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--disable-pip-version-check",
        "--no-deps",
        "--no-compile",
        "--require-hashes",
        "--only-binary=:all:",
        f"--platform={PIP_PLATFORMS[architecture]}",
        f"--python-version={version}",
        "--implementation=cp",
        f"--abi=cp{version.replace('.', '')}",
        "--target",
        str(target),
        "--requirement",
        str(definition.wheels.requirements),
    ]
    with log.open("a", encoding="utf-8") as output:
        result = run(command, output=output, check=False, failure="pip install")
    if result.returncode != 0:
        text = log.read_text(encoding="utf-8", errors="replace")
        code = ExitCode.ARCHIVE if "NewConnectionError" in text else ExitCode.BUILD
        raise ImageError(
            f"pip could not install {definition.wheels.requirements.name}: see {log}", code
        )
