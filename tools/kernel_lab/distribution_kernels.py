"""Simulated distribution kernels (distribution_kernels.yaml): a Debian arm64 headers tree
changed into the kernel a board owner runs elsewhere, packaged as linux-headers-<release> and
installed with apt, so the DKMS hook decides as it would for the real kernel.

A Debian headers tree is two directories: the flavour's (/usr/src/linux-headers-<release>:
.config, Module.symvers, include/generated, .kernelvariables, a Makefile that includes the
common tree's) and the common one (/usr/src/linux-headers-<version>-common: the sources'
headers). Symbols change the flavour's .config, auto.conf and autoconf.h; the release changes
utsrelease.h and KERNELRELEASE; what a vendor kernel exports beyond Debian's (``exports``)
needs its own copy of the common tree (for the header that declares it) and its symbols in
Module.symvers.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import yaml

from pipeline.tools import run

from .chroot import Chroot
from .kernels import Kernel

DESCRIPTION = Path(__file__).with_name("distribution_kernels.yaml")


@dataclass(frozen=True)
class DistributionKernel:
    name: str
    distribution: str
    base_suite: str
    suffix: str
    config: dict[str, str | None]
    # The version the release is named after ("6.6.89"); the headers' content, and with it
    # LINUX_VERSION_CODE, stay the base's: the driver's version checks must see the headers
    # they compile against.
    name_version: str | None = None
    # What the kernel exports that Debian's does not: {header, declarations, symbols}.
    exports: dict | None = None

    def release(self, base: Kernel) -> str:
        version = self.name_version or re.match(r"\d+\.\d+(\.\d+)?", base.release)[0]
        return f"{version}-{self.suffix}"


@dataclass
class Installed:
    kernel: Kernel
    returncode: int  # apt-get install's
    output: str
    configured: bool


def load(path: Path = DESCRIPTION) -> list[DistributionKernel]:
    document = yaml.safe_load(path.read_text(encoding="utf-8"))
    return [DistributionKernel(**entry) for entry in document["kernels"]]


def for_suite(suite: str) -> list[DistributionKernel]:
    return [kernel for kernel in load() if kernel.base_suite == suite]


def derive(chroot: Chroot, base: Kernel, kernel: DistributionKernel, scratch: Path) -> Path:
    """The headers package of ``kernel`` made from the installed headers of ``base``."""
    release = kernel.release(base)
    package = f"linux-headers-{release}"
    root = scratch / package
    flavour_dir = root / f"usr/src/{package}"
    shutil.copytree(
        chroot.path(f"/usr/src/linux-headers-{base.release}"), flavour_dir, symlinks=True
    )
    makefile = flavour_dir / "Makefile"
    # 7.x headers name their own directory too (KBUILD_OUTPUT): the build must go to the copy.
    makefile.write_text(
        makefile.read_text(encoding="utf-8").replace(
            f"/usr/src/linux-headers-{base.release}", f"/usr/src/{package}"
        ),
        encoding="utf-8",
    )
    common = re.search(r"include (/usr/src/\S+)/Makefile", makefile.read_text(encoding="utf-8"))
    if common is None:
        raise RuntimeError(f"{makefile}: no common tree named")
    if kernel.exports:
        own_common = f"/usr/src/{package}-common"
        shutil.copytree(chroot.path(common[1]), root / own_common.lstrip("/"), symlinks=True)
        makefile.write_text(
            makefile.read_text(encoding="utf-8").replace(common[1], own_common), encoding="utf-8"
        )
        _declare_exports(root / own_common.lstrip("/"), flavour_dir, kernel.exports)
    _set_symbols(flavour_dir, kernel.config)
    _set_release(flavour_dir, base.release, release)
    modules = root / f"usr/lib/modules/{release}"
    modules.mkdir(parents=True)
    (modules / "build").symlink_to(f"/usr/src/{package}")
    _control(root, package, release, kernel)
    deb = scratch / f"{package}_1_arm64.deb"
    run(
        ["dpkg-deb", "--root-owner-group", "-Znone", "-b", root, deb],
        failure=f"building {deb.name}",
    )
    return deb


def install(chroot: Chroot, base: Kernel, kernel: DistributionKernel) -> Installed:
    """Derive, then install with apt (the headers' postinst runs DKMS for the new kernel)."""
    release = kernel.release(base)
    with tempfile.TemporaryDirectory(prefix="distribution-kernel-") as scratch:
        deb = derive(chroot, base, kernel, Path(scratch))
        inside = chroot.copy_in(deb, f"/tmp/distribution-kernels/{deb.name}")
    result = chroot.run(
        ["apt-get", "install", "-y", "-q", "--no-install-recommends", inside], check=False
    )
    status = chroot.run(
        ["dpkg-query", "-W", "-f=${db:Status-Abbrev}", f"linux-headers-{release}"], check=False
    ).stdout
    return Installed(
        Kernel(
            release=release,
            headers=f"linux-headers-{release}",
            common=(),
            kbuild=base.kbuild,
            compiler=base.compiler,
        ),
        result.returncode,
        result.stdout + result.stderr,
        status.strip() == "ii",
    )


def remove(chroot: Chroot, installed: Installed) -> str:
    result = chroot.run(["apt-get", "purge", "-y", "-q", installed.kernel.headers], check=False)
    return result.stdout + result.stderr


def imported_symbols(chroot: Chroot, module_path: str) -> set[str]:
    """The symbols a built module imports, by their modversions."""
    output = chroot.run(["modprobe", "--dump-modversions", module_path], check=False).stdout
    return {fields[1] for line in output.splitlines() if len(fields := line.split()) >= 2}


def _set_symbols(tree: Path, symbols: dict[str, str | None]) -> None:
    config, auto = tree / ".config", tree / "include/config/auto.conf"
    header = tree / "include/generated/autoconf.h"
    for name, value in symbols.items():
        bare = name.removeprefix("CONFIG_")
        for path in (config, auto):
            text = re.sub(
                rf"(?m)^(# )?{name}(=.*| is not set)\n", "", path.read_text(encoding="utf-8")
            )
            if value is not None:
                text += f"{name}={value}\n"
            elif path == config:
                text += f"# {name} is not set\n"
            path.write_text(text, encoding="utf-8")
        text = re.sub(
            rf"(?m)^#define CONFIG_{bare}(_MODULE)? .*\n", "", header.read_text(encoding="utf-8")
        )
        if value == "y":
            text += f"#define CONFIG_{bare} 1\n"
        elif value == "m":
            text += f"#define CONFIG_{bare}_MODULE 1\n"
        header.write_text(text, encoding="utf-8")


def _set_release(tree: Path, old: str, new: str) -> None:
    variables = tree / ".kernelvariables"
    variables.write_text(
        variables.read_text(encoding="utf-8").replace(
            f"KERNELRELEASE = {old}", f"KERNELRELEASE = {new}"
        ),
        encoding="utf-8",
    )
    uts = tree / "include/generated/utsrelease.h"
    uts.write_text(f'#define UTS_RELEASE "{new}"\n', encoding="utf-8")
    stamp = tree / "include/config/kernel.release"
    if stamp.exists():
        stamp.write_text(new + "\n", encoding="utf-8")


def _declare_exports(common: Path, flavour_dir: Path, exports: dict) -> None:
    header = common / exports["header"]
    text = header.read_text(encoding="utf-8")
    end = text.rstrip().rfind("#endif")
    declarations = "\n" + exports["declarations"]
    header.write_text(text[:end] + declarations + "\n" + text[end:], encoding="utf-8")
    symvers = flavour_dir / "Module.symvers"
    with symvers.open("a", encoding="utf-8") as stream:
        for symbol in exports["symbols"]:
            stream.write(f"0x00000000\t{symbol}\tvmlinux\tEXPORT_SYMBOL_GPL\t\n")


def _control(root: Path, package: str, release: str, kernel: DistributionKernel) -> None:
    debian = root / "DEBIAN"
    debian.mkdir()
    (debian / "control").write_text(
        f"Package: {package}\nVersion: 1\nArchitecture: arm64\n"
        "Maintainer: kernel lab <lab@example.org>\nSection: kernel\nPriority: optional\n"
        f"Description: simulated headers: {kernel.distribution}\n"
        f" Derived from Debian's headers by the kernel lab ({kernel.name}).\n",
        encoding="utf-8",
    )
    # What Debian's linux-headers postinst does: the DKMS hook, for this release.
    postinst = debian / "postinst"
    postinst.write_text(
        "#!/bin/sh\nset -e\n"
        'if [ "$1" = configure ] && [ -d /etc/kernel/header_postinst.d ]; then\n'
        f"\trun-parts --report --exit-on-error --arg={release} /etc/kernel/header_postinst.d\n"
        "fi\n",
        encoding="utf-8",
    )
    postinst.chmod(0o755)
