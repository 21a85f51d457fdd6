"""A real Zhouyi user-mode driver run under qemu-aarch64 against a fake KMD of one driver line.

fake_kmd.c, preloaded, stands in for /dev/aipu and records each ioctl; it is compiled with the
line's own armchina_aipu.h, so it knows exactly that line's ioctl numbers and answers any
other with ENOTTY, as that KMD does. run_umd.c is what an application does first with a
user-mode driver (libnoe's noe_ functions or libaipudrv's aipu_ ones). Both are built at test
time with the aarch64 cross compiler.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from pipeline.config import load_package
from pipeline.library_package import build_library_package, cached_library_upstream
from testkit.zhouyi_uapi import COMPILER, EMULATOR, ioctl_names

HERE = Path(__file__).resolve().parent
SYSROOT = Path("/usr/aarch64-linux-gnu")  # the cross toolchain's arm64 libc and libstdc++


@dataclass(frozen=True)
class FakeKmd:
    header: Path  # the line's armchina_aipu.h
    version: str  # what AIPU_IOCTL_GET_DRIVER_VERSION answers
    isa_version: int  # the partition's ISA version it reports (5: Zhouyi V3, the CD8180's)


@dataclass(frozen=True)
class Trace:
    output: list[str]  # the application's lines
    log: list[str]  # the fake KMD's lines: open, ioctl nr=... size=... number=... result=...
    returncode: int

    def ioctls(self) -> list[dict[str, str]]:
        return [
            dict(field.split("=", 1) for field in line.split()[1:])
            for line in self.log
            if line.startswith("ioctl ")
        ]


def build(kmd: FakeKmd, directory: Path) -> tuple[Path, Path]:
    """The fake KMD's shared object and the UMD application, built into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    known = directory / "known_ioctls.h"
    known.write_text(
        "".join(f"KNOWN({name})\n" for name in ioctl_names(kmd.header)), encoding="utf-8"
    )
    shim, application = directory / "fake_kmd.so", directory / "run_umd"
    common = ["-O1", "-Wall", "-Werror"]
    subprocess.run(
        [
            COMPILER, *common, "-shared", "-fPIC", f"-I{directory}",
            "-include", "linux/ioctl.h", "-include", str(kmd.header),
            f'-DFAKE_KMD_VERSION="{kmd.version}"', f"-DFAKE_ISA_VERSION={kmd.isa_version}",
            "-o", str(shim), str(HERE / "fake_kmd.c"), "-ldl",
        ],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    subprocess.run(
        [COMPILER, *common, "-o", str(application), str(HERE / "run_umd.c"), "-ldl"],
        check=True,
        capture_output=True,
        text=True,
    )
    return shim, application


def run_umd(
    kmd: FakeKmd, library: Path, prefix: str, directory: Path, timeout: float = 120
) -> Trace:
    """A UMD (``library``, its functions named ``<prefix>_...``) initialised, asked the
    topology and closed, on the fake KMD."""
    shim, application = build(kmd, directory)
    log = directory / "ioctl.log"
    log.unlink(missing_ok=True)
    result = subprocess.run(
        [
            EMULATOR, "-L", str(SYSROOT),
            "-E", f"LD_PRELOAD={shim}", "-E", f"FAKE_AIPU_LOG={log}",
            str(application), str(library), prefix,
        ],
        capture_output=True, text=True, timeout=timeout, env={**os.environ, "LC_ALL": "C"},
    )  # fmt: skip
    lines = log.read_text(encoding="utf-8").splitlines() if log.exists() else []
    return Trace(result.stdout.splitlines(), lines, result.returncode)


def unpacked_libnoe(deb: Path, directory: Path) -> Path:
    """libnoe.so.<version> of the .deb, unpacked into ``directory``."""
    subprocess.run(["dpkg-deb", "-x", str(deb), str(directory)], check=True)
    return next((directory / "usr/share/cix/lib").glob("libnoe.so.*.*.*"))


class Unavailable(Exception):
    """Why an input of these tests cannot be had on this machine (a test skips with it)."""


def packaged_libaipudrv(scratch: Path) -> Path:
    """libaipudrv as the project packages it ('make deb'), unpacked under ``scratch``."""
    for tool in (COMPILER, EMULATOR, "aarch64-linux-gnu-g++"):
        if shutil.which(tool) is None:
            raise Unavailable(f"{tool} is not installed: run 'make deps'")
    config = load_package("aipu-compass-dkms")
    if cached_library_upstream(config) is None:
        raise Unavailable("the pinned libaipudrv source is not in the cache: run 'make fetch'")
    built = build_library_package(config, scratch / "dist", lintian=False)
    deb = next(path for path in built if path.name.startswith(f"{config.library.package}_"))
    subprocess.run(["dpkg-deb", "-x", str(deb), str(scratch / "root")], check=True)
    return scratch / "root/usr/lib/aarch64-linux-gnu" / config.library.soname
