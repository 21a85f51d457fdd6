"""Resolve and install Debian's arm64 kernel headers in a chroot, the way apt would.

The current kernel ABI of a suite is read from the archive at run time (the headers
metapackage's dependency), never hard-coded. The arm64 headers package is installed with
its own postinst, so /etc/kernel/header_postinst.d/dkms runs exactly as on a board after a
kernel upgrade. Its dependencies on an arm64 compiler, kernel image or kbuild cannot be
met on an amd64 chroot, so the package is repacked without them; the amd64 kbuild of the
same version and the suite's aarch64 cross compiler are installed instead.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pipeline.errors import BuildError, ExitCode
from pipeline.tools import run

from .chroot import MIRROR, Chroot

# The only dependencies of linux-headers-*-arm64 kept when it is repacked: its
# architecture-independent headers and linux-base. The others (an arm64 compiler, kbuild,
# kernel image, libc) are arm64 packages an amd64 chroot provides otherwise; installing
# them would even remove the cross compiler.
_KEPT_DEPENDENCY = re.compile(r"^(linux-headers-\S+|linux-base)\b")


@dataclass(frozen=True)
class Kernel:
    release: str  # e.g. 6.12.57+deb13-arm64 (the /lib/modules name)
    headers: str  # linux-headers-<release>
    common: tuple[str, ...]  # arch-independent headers packages it depends on
    kbuild: str  # linux-kbuild-<version>, installed for amd64
    compiler: str  # gcc-N-aarch64-linux-gnu


def _depends(
    chroot: Chroot, package: str, target_release: str | None, options: Sequence[str] = ()
) -> list[str]:
    release = ["-t", target_release] if target_release else []
    output = chroot.run(
        ["apt-cache", *options, *release, "depends", "--no-recommends", "--no-suggests", package]
    ).stdout
    return [
        line.split(":", 1)[1].strip().split(":")[0].strip("<>")
        for line in output.splitlines()
        if line.strip().startswith(("Depends:", "|Depends:"))
    ]


def resolve(
    chroot: Chroot, metapackage: str = "linux-headers-arm64", target_release: str | None = None
) -> Kernel:
    """The kernel a headers metapackage (or a concrete headers package) points at now."""
    headers = metapackage
    if not re.match(r"^linux-headers-\d", metapackage):
        candidates = [
            name
            for name in _depends(chroot, f"{metapackage}:arm64", target_release)
            if re.match(r"^linux-headers-\d", name)
        ]
        if not candidates:
            raise BuildError(
                f"{metapackage}:arm64 has no concrete headers package in {chroot.suite.name}",
                ExitCode.BUILD,
            )
        headers = candidates[0]
    depends = _depends(chroot, f"{headers}:arm64", target_release)
    # 6.x headers depend on gcc-N, 7.x on gcc-N-for-host: either names the compiler version.
    compilers = [
        match[1] for name in depends if (match := re.match(r"^(gcc-\d+)(-for-host)?$", name))
    ]
    kbuilds = [name for name in depends if name.startswith("linux-kbuild-")]
    common = tuple(name for name in depends if re.match(r"^linux-headers-.*-common", name))
    if not compilers or not kbuilds:
        raise BuildError(f"cannot tell compiler and kbuild of {headers}: {depends}", ExitCode.BUILD)
    return Kernel(
        release=headers.removeprefix("linux-headers-"),
        headers=headers,
        common=common,
        kbuild=kbuilds[0],
        compiler=f"{compilers[0]}-aarch64-linux-gnu",
    )


def install(chroot: Chroot, kernel: Kernel, target_release: str | None = None) -> str:
    """Install the kernel's headers like apt on a board would; returns the postinst output."""
    chroot.apt_install(
        f"{kernel.kbuild}:amd64", kernel.compiler, *kernel.common, target_release=target_release
    )
    with tempfile.TemporaryDirectory(prefix="headers-") as scratch:
        scratch_path = Path(scratch)
        release = f"-t {target_release} " if target_release else ""
        inside = f"/tmp/lab-{kernel.headers}"
        chroot.run(
            f"mkdir -p {inside} && cd {inside} && apt-get download {release}{kernel.headers}:arm64"
        )
        downloaded = next(chroot.path(inside).glob("*.deb"))
        repacked = _repack_without_foreign_dependencies(downloaded, scratch_path)
        chroot.copy_in(repacked, f"{inside}/repacked/{repacked.name}")
        package_file = f"{inside}/repacked/{repacked.name}"
        result = chroot.run(
            f"apt-get install -y -q --no-install-recommends --no-remove {package_file}"
        )
        # The archive has the same version with the original dependencies; held, apt never
        # tries to "fix" the installed package back to them.
        chroot.run(f"apt-mark hold {kernel.headers}:arm64 && rm -rf {inside}")
        return result.stdout + result.stderr


def _repack_without_foreign_dependencies(deb: Path, scratch: Path) -> Path:
    unpacked = scratch / "unpacked"
    run(["dpkg-deb", "-R", deb, unpacked], failure=f"unpacking {deb.name}")
    control = unpacked / "DEBIAN" / "control"
    lines = control.read_text(encoding="utf-8").splitlines()
    rewritten = []
    for line in lines:
        if line.startswith("Depends:"):
            kept = [
                dependency.strip()
                for dependency in line[len("Depends:") :].split(",")
                if _KEPT_DEPENDENCY.match(dependency.strip())
            ]
            if not kept:
                continue
            line = "Depends: " + ", ".join(kept)
        rewritten.append(line)
    lines = rewritten
    control.write_text("\n".join(lines) + "\n", encoding="utf-8")
    target = scratch / deb.name
    # Uncompressed: it is installed once, right away; xz would cost seconds per kernel.
    run(["dpkg-deb", "-Znone", "-b", unpacked, target], failure=f"repacking {deb.name}")
    return target


_FLAVOUR = re.compile(r"-((?:[a-z]+-)?arm64(?:-[a-z0-9]+)?)$")


def flavour(release: str) -> str:
    """arm64, cloud-arm64, rt-arm64, arm64-16k, ... of a kernel release."""
    match = _FLAVOUR.search(release)
    return match[1] if match else release


def abi(release: str) -> str:
    """The part of a release its flavours share: 6.1.0-50, 6.12.107+deb13, 7.3."""
    return release.removesuffix(f"-{flavour(release)}")


def flavours(chroot: Chroot) -> list[str]:
    """Every arm64 headers metapackage the suite carries (whatever flavours appear next)."""
    output = chroot.run(
        [
            "apt-cache",
            "search",
            "--names-only",
            r"^linux-headers-([a-z][a-z0-9]*-)*arm64(-[a-z0-9]+)*$",
        ]
    ).stdout
    return sorted({line.split(" ", 1)[0] for line in output.splitlines() if line.strip()})


def archive_versions(chroot: Chroot, package: str) -> dict[str, str]:
    """archive (suite) name -> version of an arm64 package, as apt sees the sources."""
    output = chroot.run(["apt-cache", "madison", f"{package}:arm64"], check=False).stdout
    versions: dict[str, str] = {}
    for line in output.splitlines():
        # "linux-headers-arm64 | 7.3~rc7-1~exp1 | http://deb.debian.org/debian experimental/main
        # arm64 Packages"
        fields = [field.strip() for field in line.split("|")]
        if len(fields) == 3 and fields[2].endswith("Packages"):
            archive = fields[2].split()[1].split("/")[0]
            versions.setdefault(archive, fields[1])
    return versions


def newer(chroot: Chroot, version: str, than: str) -> bool:
    return (
        chroot.run(["dpkg", "--compare-versions", version, "gt", than], check=False).returncode == 0
    )


def previous_abi(chroot: Chroot, current: Kernel, target_release: str | None) -> str:
    """The newest headers package of the same flavour older than ``current`` in the suite."""
    release = ["-t", target_release] if target_release else []
    output = chroot.run(
        ["apt-cache", *release, "search", "--names-only", r"^linux-headers-[0-9].*-arm64$"]
    ).stdout
    flavour = current.release.split("-", 1)[1] if "-" in current.release else ""
    candidates = []
    for line in output.splitlines():
        name = line.split(" ", 1)[0]
        release_name = name.removeprefix("linux-headers-")
        if release_name.split("-", 1)[-1] != flavour:
            continue
        if _numeric(release_name) < _numeric(current.release):
            candidates.append((_numeric(release_name), name))
    if not candidates:
        raise BuildError(
            f"no arm64 headers older than {current.release} in {chroot.suite.name}", ExitCode.BUILD
        )
    return max(candidates)[1]


def _numeric(release: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", release.split("-")[0].split("+")[0]))


@dataclass(frozen=True)
class OlderHeaders:
    """An older suite's arm64 headers installed next to the suite's own kernels."""

    headers: str
    common: tuple[str, ...]
    release: str
    returncode: int  # of apt-get install
    output: str
    configured: bool  # dpkg calls the headers package installed, not half-configured


def install_older_suite_headers(chroot: Chroot, older_release: str) -> OlderHeaders:
    """Install ``older_release``'s current arm64 headers with their postinst (the DKMS
    hook runs), as an old vendor or previous-release kernel sits next to a board's current
    one. The older suite gets its own apt lists, so the chroot's resolution is untouched."""
    # In the suite's apt cache (kept between runs): later runs refresh the lists cheaply and
    # download nothing again.
    base = f"/var/cache/apt/archives/lab-{older_release}"
    keyrings = ["/usr/share/keyrings/debian-archive-keyring.gpg"]
    # An older release's signing key may have moved to the removed-keys keyring.
    removed = "/usr/share/keyrings/debian-archive-removed-keys.gpg"
    if chroot.path(removed).exists():
        keyrings.append(removed)
    chroot.path(f"{base}/lists/partial").mkdir(parents=True, exist_ok=True)
    chroot.path(f"{base}/parts").mkdir(parents=True, exist_ok=True)
    chroot.path(f"{base}/debs").mkdir(parents=True, exist_ok=True)
    chroot.path(f"{base}/sources.list").write_text(
        f"deb [arch=arm64 signed-by={','.join(keyrings)}] {MIRROR} {older_release} main\n",
        encoding="utf-8",
    )
    options = [
        f"-oDir::Etc::SourceList={base}/sources.list",
        f"-oDir::Etc::SourceParts={base}/parts",
        f"-oDir::State::Lists={base}/lists",
        "-oDir::Cache::pkgcache=",
        "-oDir::Cache::srcpkgcache=",
    ]
    chroot.run(["apt-get", *options, "update", "-q", "-oAPT::Update::Error-Mode=any"])
    headers = next(
        (
            name
            for name in _depends(chroot, "linux-headers-arm64:arm64", None, options)
            if re.match(r"^linux-headers-\d", name)
        ),
        None,
    )
    if headers is None:
        raise BuildError(f"{older_release} has no arm64 headers package", ExitCode.BUILD)
    common = [
        name
        for name in _depends(chroot, f"{headers}:arm64", None, options)
        if re.match(r"^linux-headers-.*-common", name)
    ]
    chroot.run(
        [
            "bash",
            "-c",
            f'cd {base}/debs && apt-get "$@" download {headers}:arm64 {" ".join(common)}',
            "download",
            *options,
        ]
    )
    with tempfile.TemporaryDirectory(prefix="older-headers-") as scratch:
        downloaded = next(chroot.path(f"{base}/debs").glob(f"{headers}_*.deb"))
        repacked = _repack_without_foreign_dependencies(downloaded, Path(scratch))
        chroot.copy_in(repacked, f"{base}/repacked/{repacked.name}")
    packages = [f"{base}/repacked/{repacked.name}"] + [
        f"{base}/debs/{path.name}" for path in chroot.path(f"{base}/debs").glob("*-common_*.deb")
    ]
    result = chroot.run(
        ["apt-get", "install", "-y", "-q", "--no-install-recommends", *packages], check=False
    )
    status = chroot.run(
        ["dpkg-query", "-W", "-f=${db:Status-Abbrev}", f"{headers}:arm64"], check=False
    ).stdout
    return OlderHeaders(
        headers=headers,
        common=tuple(common),
        release=headers.removeprefix("linux-headers-"),
        returncode=result.returncode,
        output=result.stdout + result.stderr,
        configured=status.strip() == "ii",
    )


def gate_misses(
    chroot: Chroot, release: str, gate: Sequence[str], release_regex: str = ""
) -> list[str]:
    """Why dkms.conf's gate (BUILD_EXCLUSIVE_CONFIG, "!" for must-be-absent, and
    BUILD_EXCLUSIVE_KERNEL) excludes this kernel; empty when the package must build for it."""
    misses = []
    if release_regex and not re.search(release_regex, release):
        misses.append(f"{release} is older than the package's kernel.min")
    # Read inside the chroot: build is an absolute symlink into the chroot's /usr/src.
    config = chroot.run(["cat", f"/lib/modules/{release}/build/.config"], check=False).stdout
    for option in gate:
        name = option.removeprefix("!")
        present = re.search(rf"(?m)^{re.escape(name)}=[ym]", config) is not None
        if option.startswith("!") and present:
            misses.append(f"{name} is set")
        elif not option.startswith("!") and not present:
            misses.append(f"{name} is off")
    return misses


def has_headers(chroot: Chroot, release: str) -> bool:
    """The kernel's build tree is there (followed inside the chroot, as dkms does)."""
    return (
        chroot.run(["test", "-e", f"/lib/modules/{release}/build/.config"], check=False).returncode
        == 0
    )
