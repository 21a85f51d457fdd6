"""The signed apt repository users add once: aptly builds it from the upload sets that
'make deb' produced (every driver package, npuctl, the archive keyring package), beside the
published one, and it replaces the published one only when complete.

One distribution per supported Debian release (the packages are the same: DKMS sources and
Python are architecture-independent), component main, indexes for arm64 and all, sources
included. One more per family whose description names its user space (package.user_space):
the build of it the family wants, each .deb as Debian built it (fetched and checked against
its pinned checksum), in a NotAutomatic suite of its own that a board follows only for the
packages npuctl provision pins.

aptly rather than reprepro: reprepro 5.3 (Debian 12 and 13) cannot publish the binary-all
indexes. The key comes from an exported secret key file or a GnuPG home; without either a
throwaway key is made and called one."""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from . import identity
from .config import load_package, package_names
from .errors import BuildError, ExitCode
from .fetch import pinned_debs
from .tools import require_tool, run

CODENAMES = ("bookworm", "trixie", "sid")
ORIGIN = identity.NAME
KEYRING_NAME = identity.KEYRING_PACKAGE
KEYRING_FILE = f"{KEYRING_NAME}.gpg"
THROWAWAY_UID = f"{identity.NAME} throwaway test key <throwaway@invalid>"


@dataclass(frozen=True)
class SigningKey:
    home: Path  # a GnuPG home holding the secret key
    fingerprint: str
    throwaway: bool


def _gpg(
    home: Path, *args: str, check: bool = True, stdin: str = ""
) -> subprocess.CompletedProcess[str]:
    return run(
        ["gpg", "--homedir", home, "--batch", "--no-tty", *args],
        input_data=stdin,
        check=check,
        failure=f"gpg {' '.join(args[:2])}",
        code=ExitCode.USAGE,
    )


def _secret_fingerprint(home: Path) -> str:
    listing = _gpg(home, "--with-colons", "--list-secret-keys").stdout
    fingerprints = re.findall(r"^fpr:+([0-9A-F]{40}):", listing, re.MULTILINE)
    if not fingerprints:
        raise BuildError(f"no secret key in {home}: give one that can sign", ExitCode.USAGE)
    return fingerprints[0]


@contextmanager
def _temporary_home() -> Iterator[Path]:
    """A GnuPG home with a short path: gpg-agent's socket path must stay under 108 bytes."""
    home = Path(tempfile.mkdtemp(prefix="gpg-", dir="/tmp"))
    try:
        yield home
    finally:
        run(
            ["gpgconf", "--homedir", home, "--kill", "gpg-agent"],
            check=False,
            failure="stopping gpg-agent",
        )
        shutil.rmtree(home, ignore_errors=True)


def _throwaway_key(work: Path) -> Path:
    """The throwaway secret key, made once and kept in the work folder: the next version must
    be signed by the key users of the test repository already have."""
    kept = work / "throwaway-key.asc"
    if kept.exists():
        return kept
    with _temporary_home() as home:
        _gpg(
            home, "--passphrase", "", "--quick-generate-key", THROWAWAY_UID, "ed25519", "sign", "1y"
        )
        exported = _gpg(home, "--armor", "--export-secret-keys").stdout
    work.mkdir(parents=True, exist_ok=True)
    partial = kept.with_suffix(".partial")
    partial.write_text(exported, encoding="ascii")
    partial.chmod(0o600)
    partial.replace(kept)
    return kept


@contextmanager
def signing_key(work: Path, key_file: Path | None, gnupg_home: Path | None) -> Iterator[SigningKey]:
    require_tool("gpg")
    if gnupg_home is not None:
        if not gnupg_home.is_dir():
            raise BuildError(f"{gnupg_home} is not a GnuPG home folder", ExitCode.USAGE)
        yield _usable(gnupg_home, throwaway=False)
        return
    if key_file is not None and not key_file.is_file():
        raise BuildError(f"{key_file} does not exist", ExitCode.USAGE)
    source = key_file or _throwaway_key(work)
    with _temporary_home() as home:
        _gpg(home, "--import", str(source))
        yield _usable(home, throwaway=key_file is None)


def _usable(home: Path, throwaway: bool) -> SigningKey:
    fingerprint = _secret_fingerprint(home)
    # A key that cannot sign (expired, revoked, encryption-only) fails here, not half-way.
    probe = _gpg(
        home,
        "--local-user",
        fingerprint,
        "--pinentry-mode",
        "loopback",
        "--passphrase",
        "",
        "--clearsign",
        check=False,
        stdin="can this key sign?",
    )
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["cannot sign"])[-1]
        raise BuildError(f"the key {fingerprint} cannot sign: {last}", ExitCode.USAGE)
    return SigningKey(home, fingerprint, throwaway)


def _published_versions(repo: Path) -> dict[str, str]:
    """package -> version, from the published repository's indexes (empty when none)."""
    versions: dict[str, str] = {}
    index = repo / "dists" / CODENAMES[-1] / "main" / "binary-arm64" / "Packages"
    if not index.exists():
        return versions
    for stanza in index.read_text(encoding="utf-8").split("\n\n"):
        name = re.search(r"^Package: (\S+)$", stanza, re.MULTILINE)
        version = re.search(r"^Version: (\S+)$", stanza, re.MULTILINE)
        if name and version:
            versions[name[1]] = version[1]
    return versions


def _version_of(changes: Path) -> tuple[str, str]:
    text = changes.read_text(encoding="utf-8")
    source = re.search(r"^Source: (\S+)", text, re.MULTILINE)
    version = re.search(r"^Version: (\S+)", text, re.MULTILINE)
    if not (source and version):
        raise BuildError(f"{changes} is not a .changes file", ExitCode.USAGE)
    return source[1], version[1]


def _newer(candidate: str, published: str) -> bool:
    compared = run(
        ["dpkg", "--compare-versions", candidate, "gt", published],
        check=False,
        failure="dpkg --compare-versions",
    )
    return compared.returncode == 0


def _export_public(key: SigningKey, target: Path) -> None:
    """The public key as a binary keyring file, what Signed-By and gpgv read."""
    run(
        [
            *("gpg", "--homedir", key.home, "--batch", "--yes"),
            *("--output", target, "--export", key.fingerprint),
        ],
        failure="exporting the repository's public key",
    )


def build_keyring_package(key: SigningKey, version: str, work: Path, dist: Path) -> Path:
    """aipu-archive-keyring: the public key in /usr/share/keyrings, so a later upgrade can
    rotate it, as Debian's own keyrings do."""
    require_tool("dpkg-deb")
    root = work / "keyring-package"
    shutil.rmtree(root, ignore_errors=True)
    keyrings = root / "usr/share/keyrings"
    keyrings.mkdir(parents=True)
    _export_public(key, keyrings / KEYRING_FILE)
    (keyrings / KEYRING_FILE).chmod(0o644)
    docs = root / f"usr/share/doc/{KEYRING_NAME}"
    docs.mkdir(parents=True)
    (docs / "copyright").write_text(
        "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n"
        f"Upstream-Name: {KEYRING_NAME}\n\nFiles: *\nCopyright: the {identity.NAME} maintainers\n"
        "License: public-domain\n A public OpenPGP key carries no copyright.\n",
        encoding="utf-8",
    )
    changelog = (
        f"{KEYRING_NAME} ({version}) unstable; urgency=medium\n\n"
        f"  * The key of the {identity.NAME} apt repository.\n\n"
        f" -- {identity.MAINTAINERS}  Mon, 23 Nov 2026 00:00:00 +0000\n"
    )
    (docs / "changelog.gz").write_bytes(gzip.compress(changelog.encode(), 9, mtime=0))
    (docs / "changelog.gz").chmod(0o644)
    control = root / "DEBIAN"
    control.mkdir()
    (control / "control").write_text(
        f"Package: {KEYRING_NAME}\nVersion: {version}\nArchitecture: all\n"
        f"Maintainer: {identity.MAINTAINERS}\nSection: misc\n"
        "Priority: optional\nMulti-Arch: foreign\n"
        f"Description: OpenPGP key of the {identity.NAME} apt repository\n"
        " The key apt checks the repository's Release files with\n"
        f" (/usr/share/keyrings/{KEYRING_FILE}).\n",
        encoding="utf-8",
    )
    target = dist / f"{KEYRING_NAME}_{version}_all.deb"
    run(
        ["dpkg-deb", "--root-owner-group", "-Zxz", "-b", root, target],
        failure=f"building {target.name}",
    )
    return target


def build_repository(
    dist: Path,
    repo: Path,
    work: Path,
    key_file: Path | None = None,
    gnupg_home: Path | None = None,
    keyring_version: str = "1",
) -> SigningKey:
    require_tool("aptly")
    changes = sorted(
        path for path in dist.glob("*.changes") if not path.name.startswith(KEYRING_NAME)
    )
    if not changes:
        raise BuildError(f"no packages in {dist}: run 'make deb' first", ExitCode.USAGE)
    work.mkdir(parents=True, exist_ok=True)
    with signing_key(work, key_file, gnupg_home) as key:
        published = _published_versions(repo)
        for path in changes:
            source, version = _version_of(path)
            old = published.get(source)
            if old is not None and old != version and not _newer(version, old):
                raise BuildError(
                    f"{source} {version} is not newer than the published {old}: raise the "
                    "version (apt would never upgrade to it)",
                    ExitCode.USAGE,
                )
        keyring_deb = build_keyring_package(key, keyring_version, work, work)
        repo.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{repo.name}-", dir=repo.parent))
        try:
            aptly = _Aptly(work / "aptly", {**os.environ, "GNUPGHOME": str(key.home)})
            for codename in CODENAMES:
                name = f"{ORIGIN}-{codename}"
                aptly("repo", "create", f"-distribution={codename}", "-component=main", name)
                for path in changes:
                    aptly(
                        "repo",
                        "include",
                        "-accept-unsigned",
                        "-ignore-signatures",
                        "-no-remove-files",
                        f"-repo={name}",
                        path,
                    )
                aptly("repo", "add", name, keyring_deb)
                aptly(*_publish(key, name))
            for suite, debs in user_space_suites():
                name = f"{ORIGIN}-{suite}"
                aptly("repo", "create", f"-distribution={suite}", "-component=main", name)
                aptly("repo", "add", name, *debs)
                aptly(*_publish(key, name, "-notautomatic=yes", "-butautomaticupgrades=yes"))
            staging.rmdir()
            shutil.copytree(aptly.public, staging)
            shutil.copyfile(keyring_deb, staging / keyring_deb.name)
            _export_public(key, staging / KEYRING_FILE)
            for path in staging.rglob("*"):
                path.chmod(0o755 if path.is_dir() else 0o644)
            staging.chmod(0o755)
            _swap(staging, repo)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        return key


def _publish(key: SigningKey, name: str, *options: str) -> list[str]:
    return [
        "publish",
        "repo",
        "-architectures=arm64,all,source",
        "-batch",
        "-passphrase=",
        f"-gpg-key={key.fingerprint}",
        f"-origin={ORIGIN}",
        f"-label={ORIGIN}",
        *options,
        name,
    ]


def user_space_suites() -> list[tuple[str, list[Path]]]:
    """Each family's user-space suite and the .debs of the build it wants (downloaded once,
    checked against the description's checksums, cached)."""
    found = []
    for package in package_names():
        wanted = load_package(package).wanted_user_space()
        if wanted is not None:
            found.append((wanted.suite, pinned_debs(wanted.debs, wanted.described_in)))
    return found


class _Aptly:
    """aptly with its own configuration and database, made afresh for each build."""

    def __init__(self, root: Path, env: dict[str, str]) -> None:
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
        self.config = root / "aptly.conf"
        self.config.write_text(
            json.dumps({"rootDir": str(root / "db"), "gpgProvider": "gpg2"}), encoding="utf-8"
        )
        self.public = root / "db" / "public"
        self.env = env

    def __call__(self, *args: object) -> None:
        result = run(
            ["aptly", f"-config={self.config}", *(str(a) for a in args)],
            env=self.env,
            check=False,
            failure=f"aptly {args[0]}",
        )
        if result.returncode != 0:
            lines = [line for line in (result.stderr + result.stdout).splitlines() if line]
            reason = next((line for line in lines if "ERROR" in line), lines[-1] if lines else "")
            raise BuildError(f"aptly {args[0]} {args[1]}: {reason}", ExitCode.BUILD)


def _swap(staging: Path, repo: Path) -> None:
    """Readers see the old repository or the new one, never a mix."""
    if repo.exists():
        old = repo.with_name(f".{repo.name}.old")
        shutil.rmtree(old, ignore_errors=True)
        repo.rename(old)
        staging.rename(repo)
        shutil.rmtree(old, ignore_errors=True)
    else:
        staging.rename(repo)
