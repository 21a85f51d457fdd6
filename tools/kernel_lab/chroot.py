"""Debian chroots made with debootstrap, cached as tarballs, entered with mounts cleaned up.

A chroot is an amd64 Debian of one suite with arm64 added as a foreign architecture: the
kernel headers are arm64, the compiler is the suite's own aarch64 cross compiler and the
kbuild tools (fixdep, modpost) are the amd64 build of the same kernel version.
"""

from __future__ import annotations

import fcntl
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from pipeline.errors import BuildError, ExitCode
from pipeline.fetch import cache_root
from pipeline.tools import last_line, require_tool, run

MIRROR = "http://deb.debian.org/debian"
SECURITY_MIRROR = "http://deb.debian.org/debian-security"

# What every chroot gets before it is cached: DKMS and what it runs.
BASE_PACKAGES = ("dkms", "kmod", "make", "openssl", "xz-utils", "zstd", "ca-certificates")

_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "DEBIAN_FRONTEND": "noninteractive",
    "LC_ALL": "C.UTF-8",
    "HOME": "/root",
}


@dataclass(frozen=True)
class Suite:
    """A Debian suite that carries arm64 kernels, and how to reach it."""

    name: str  # also the chroot's name
    release: str  # the base release debootstrap installs
    extra_suites: tuple[str, ...] = ()
    security: bool = True
    target_release: str | None = None  # apt -t, for backports and experimental

    @property
    def archives(self) -> frozenset[str]:
        """The archive names (apt's "suite" field) whose packages are this suite's own."""
        if self.target_release:
            return frozenset({self.target_release})
        return frozenset({self.release, f"{self.release}-updates", f"{self.release}-security"})

    def sources(self) -> str:
        lines = [f"deb {MIRROR} {self.release} main"]
        lines += [f"deb {MIRROR} {suite} main" for suite in self.extra_suites]
        if self.security:
            lines.append(f"deb {SECURITY_MIRROR} {self.release}-security main")
        return "\n".join(lines) + "\n"


def _one_line(script: str) -> str:
    line = script.strip().splitlines()[0] if script.strip() else ""
    return line if len(line) <= 80 else line[:77] + "..."


class CommandFailed(BuildError):
    def __init__(self, command: str, result: subprocess.CompletedProcess[str]) -> None:
        detail = last_line(result.stderr) or last_line(result.stdout)
        super().__init__(f"'{command}' exited {result.returncode}: {detail}", ExitCode.BUILD)
        self.result = result


class Chroot:
    """A working chroot directory. Use ``with chroot.mounted():`` around ``run`` calls."""

    def __init__(self, root: Path, suite: Suite) -> None:
        self.root = root
        self.suite = suite

    def path(self, inside: str) -> Path:
        return self.root / inside.lstrip("/")

    def _archives(self) -> Path:
        """The suite's downloaded packages, shared by every chroot of the suite."""
        return cache_root() / "apt-archives" / self.suite.name

    @contextmanager
    def mounted(self) -> Iterator[Chroot]:
        """/proc, /dev/pts, and the suite's shared apt archive so warm runs download nothing."""
        archives = self._archives()
        archives.mkdir(parents=True, exist_ok=True)
        with ExitStack() as stack:
            for source, target, options in (
                ("proc", self.path("/proc"), ["-t", "proc"]),
                ("devpts", self.path("/dev/pts"), ["-t", "devpts"]),
                (str(archives), self.path("/var/cache/apt/archives"), ["--bind"]),
            ):
                target.mkdir(parents=True, exist_ok=True)
                run(["mount", *options, source, target], failure=f"mounting {target}")
                stack.callback(
                    run, ["umount", "--lazy", target], check=False, failure=f"unmounting {target}"
                )
            yield self

    def run(
        self, command: str | Sequence[str], *, check: bool = True, timeout: float = 1800
    ) -> subprocess.CompletedProcess[str]:
        script = command if isinstance(command, str) else shlex.join(command)
        with self._apt_turn(script):
            result = self._run(script, timeout)
        if check and result.returncode != 0:
            raise CommandFailed(script, result)
        return result

    @contextmanager
    def _apt_turn(self, script: str) -> Iterator[None]:
        """apt locks the archive directory without waiting, and chroots of one suite share
        it (mounted()): their apt runs, in this process or another, take turns."""
        if "apt-get" not in script:
            yield
            return
        archives = self._archives()
        with archives.with_name(f"{archives.name}.lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    def _run(self, script: str, timeout: float) -> subprocess.CompletedProcess[str]:
        return run(
            [
                "chroot",
                self.root,
                "/usr/bin/env",
                "-i",
                *[f"{key}={value}" for key, value in _ENV.items()],
                "/bin/bash",
                "-c",
                script,
            ],
            check=False,
            timeout=timeout,
            failure=f"in the {self.suite.name} chroot: {_one_line(script)}",
        )

    def refresh_lists(self) -> None:
        """The package lists of now, not of when the cached base was made (a stale sid base
        resolves an old kernel or 404s); one clear line when the archive cannot be read."""
        result = self.run("apt-get update -q -o APT::Update::Error-Mode=any", check=False)
        if result.returncode != 0:
            lines = [
                line for line in (result.stdout + result.stderr).splitlines() if line[:2] in "E:W:"
            ]
            raise BuildError(
                f"cannot read the Debian archive for {self.suite.name}: "
                f"{(lines or ['apt-get update failed'])[0]} (is {MIRROR} reachable?)",
                ExitCode.BUILD,
            )

    def apt_install(self, *packages: str, target_release: str | None = None) -> None:
        release = ["-t", target_release] if target_release else []
        # --no-remove: a step that would remove packages is an error, not a silent change.
        self.run(
            [
                "apt-get",
                "install",
                "-y",
                "-q",
                "--no-install-recommends",
                "--no-remove",
                *release,
                *packages,
            ]
        )

    def copy_in(self, source: Path, inside: str) -> str:
        target = self.path(inside)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
        return inside

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def base_tarball(suite: Suite) -> Path:
    # Keyed by the base release: backports and experimental share their release's base and
    # get their own sources.list when a chroot is made from it.
    return cache_root() / "chroots" / f"{suite.release}.tar.zst"


def create_chroot(suite: Suite, workdir: Path) -> Chroot:
    """A fresh chroot of ``suite`` in ``workdir/<suite>``, from the cached base if any."""
    for tool in ("debootstrap", "zstd", "tar", "chroot", "mount"):
        require_tool(tool)
    root = workdir / suite.name
    if root.exists():
        shutil.rmtree(root)
    tarball = base_tarball(suite)
    tarball.parent.mkdir(parents=True, exist_ok=True)
    # Two suites of one release may run in parallel: one makes the base, the other waits.
    with (tarball.parent / f"{tarball.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not tarball.exists():
            _make_base_tarball(suite, tarball)
    root.mkdir(parents=True)
    run(["tar", "--zstd", "-xpf", tarball, "-C", root], failure=f"unpacking {tarball.name}")
    chroot = Chroot(root, suite)
    chroot.path("/etc/apt/sources.list").write_text(suite.sources(), encoding="utf-8")
    # A chroot lives for one run: dpkg need not fsync every file it unpacks (sbuild's and
    # pbuilder's practice); a headers package is some 15,000 files.
    chroot.path("/etc/dpkg/dpkg.cfg.d/90lab-unsafe-io").write_text(
        "force-unsafe-io\n", encoding="utf-8"
    )
    return chroot


def _make_base_tarball(suite: Suite, tarball: Path) -> None:
    tarball.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"chroot-{suite.name}-", dir=tarball.parent) as tmp:
        root = Path(tmp) / "root"
        result = run(
            ["debootstrap", "--variant=minbase", suite.release, root, MIRROR],
            check=False,
            failure=f"debootstrap {suite.release}",
        )
        if result.returncode != 0:
            raise BuildError(
                f"debootstrap {suite.release} failed: {last_line(result.stdout)} "
                "(is the Debian archive reachable?)",
                ExitCode.BUILD,
            )
        _configure(Chroot(root, Suite(suite.release, suite.release, security=suite.security)))
        partial = tarball.with_suffix(".partial")
        run(["tar", "--zstd", "-cpf", partial, "-C", root, "."], failure=f"packing {tarball.name}")
        partial.replace(tarball)


def _configure(chroot: Chroot) -> None:
    files = {
        "/etc/apt/sources.list": chroot.suite.sources(),
        # sid's and backports' Release files can be expired on a mirror.
        "/etc/apt/apt.conf.d/90lab": 'Acquire::Check-Valid-Until "false";\n'
        'APT::Install-Recommends "false";\nAPT::Install-Suggests "false";\n',
        # No daemons start inside the chroot.
        "/usr/sbin/policy-rc.d": "#!/bin/sh\nexit 101\n",
    }
    for inside, text in files.items():
        chroot.path(inside).write_text(text, encoding="utf-8")
    chroot.path("/usr/sbin/policy-rc.d").chmod(0o755)
    with chroot.mounted():
        chroot.run("dpkg --add-architecture arm64 && apt-get update -q")
        chroot.apt_install(*BASE_PACKAGES)
