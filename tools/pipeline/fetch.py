"""Get a package's pinned upstream driver source, verify its git tree id, cache it by that id.

Sources, in order of preference:
  * the cache (``$AIPU_CACHE``, default ``$XDG_CACHE_HOME/aipu-dkms``): offline;
  * a git source: ``UPSTREAM_TARBALL``, a tarball holding the subtree (at its root, in one
    top folder, or at its path in the upstream repository); else ``UPSTREAM_GIT`` (a local
    clone or a URL), default the upstream repository: a shallow, blob-filtered, sparse fetch
    of the pinned commit, because the repository is huge;
  * a Debian source package: its orig tarball from the Debian archive (``DEBIAN_MIRROR``,
    default deb.debian.org), verified by sha256 and kept in the cache, of which only the
    pinned paths are extracted.

A tree id can be recomputed from any copy of the files, so the same pin covers every source.
Nothing reaches the cache before it is verified: work happens in a sibling temporary folder
that is renamed into place, or removed.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tarfile
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

from . import identity
from .config import Config
from .errors import BuildError, ExitCode
from .tools import run

# A user's git configuration (autocrlf, filters) must not change what a tree id means.
_NEUTRAL_GIT_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_TERMINAL_PROMPT": "0",
}


def cache_root() -> Path:
    explicit = os.environ.get(identity.CACHE_VARIABLE)
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / identity.NAME


def cached_tree(config: Config) -> Path:
    return cache_root() / "upstream" / config.upstream.tree_id


def _git_env() -> dict[str, str]:
    return {**os.environ, **_NEUTRAL_GIT_ENV}


def git_tree_id(directory: Path) -> str:
    """The git tree id of a directory's content, as ``git write-tree`` would record it."""
    with tempfile.TemporaryDirectory(prefix="treeid-") as scratch:
        run(
            ["git", "init", "-q", "--bare", scratch],
            env=_git_env(),
            failure="git init failed",
            code=ExitCode.TOOL,
        )
        env = {**_git_env(), "GIT_DIR": scratch, "GIT_WORK_TREE": str(directory)}
        run(
            ["git", "add", "-A", "--force", "."],
            cwd=directory,
            env=env,
            failure=f"cannot read {directory}",
            code=ExitCode.UPSTREAM,
        )
        result = run(
            ["git", "write-tree"], env=env, failure="git write-tree failed", code=ExitCode.TOOL
        )
        return result.stdout.strip()


def find_upstream(config: Config) -> Path | None:
    """The verified cached tree, or None when it is not (or no longer) in the cache."""
    tree = cached_tree(config)
    if tree.is_dir() and git_tree_id(tree) == config.upstream.tree_id:
        return tree
    return None


def fetch_upstream(
    config: Config,
    *,
    git_source: str | None = None,
    tarball: Path | None = None,
    source_variable: str = "UPSTREAM_GIT",
) -> Path:
    """Return the verified upstream tree, fetching it into the cache when needed."""
    existing = find_upstream(config)
    if existing is not None:
        return existing
    target = cached_tree(config)
    target.parent.mkdir(parents=True, exist_ok=True)
    incoming = Path(tempfile.mkdtemp(prefix=".incoming-", dir=target.parent))
    try:
        if config.upstream.kind == "debian-source":
            source_label = config.upstream.source_file
            tree = _debian_source(config, incoming, tarball)
        elif tarball is not None:
            source_label = str(tarball)
            tree = _unpack_tarball(config, tarball, incoming)
        else:
            source_label = git_source or config.upstream.repository
            tree = _sparse_fetch(config, source_label, incoming, source_variable)
        actual = git_tree_id(tree)
        if actual != config.upstream.tree_id:
            raise BuildError(
                f"upstream tree from {source_label} has id {actual}, but "
                f"dkms/{config.name}.yaml pins {config.upstream.tree_id}: use a "
                f"copy of {config.upstream.commit[:12] or config.upstream.source_file} "
                "(nothing was cached)",
                ExitCode.VERIFY,
            )
        if target.exists():  # an unverifiable leftover: replace it
            shutil.rmtree(target)
        tree.rename(target)
        return target
    finally:
        shutil.rmtree(incoming, ignore_errors=True)


def _as_git_url(source: str, variable: str = "UPSTREAM_GIT") -> str:
    if "://" in source or source.startswith("git@"):
        return source
    path = Path(source).expanduser()
    if not path.exists():
        raise BuildError(
            f"{variable}={source} does not exist: give a clone's path or a URL",
            ExitCode.UPSTREAM,
        )
    return path.resolve().as_uri()


def _sparse_fetch(
    config: Config, source: str, workdir: Path, variable: str = "UPSTREAM_GIT"
) -> Path:
    url = _as_git_url(source, variable)
    clone = workdir / "clone"
    env = _git_env()
    commit = config.upstream.commit
    run(["git", "init", "-q", clone], env=env, failure="git init failed", code=ExitCode.TOOL)

    def git(*args: str, failure: str) -> None:
        run(["git", "-C", clone, *args], env=env, failure=failure, code=ExitCode.UPSTREAM)

    git("remote", "add", "origin", url, failure="git remote add failed")
    # Local clones (file://) only serve a filtered fetch of a bare commit id when told to.
    git(
        "config",
        "remote.origin.uploadpack",
        "git -c uploadpack.allowFilter=true -c uploadpack.allowAnySHA1InWant=true upload-pack",
        failure="git config failed",
    )
    hint = (
        f"set UPSTREAM_GIT_{config.name.upper().replace('-', '_')} to a local clone or "
        f"UPSTREAM_TARBALL_{config.name.upper().replace('-', '_')} to a tarball of the subtree"
    )
    git(
        "fetch",
        "-q",
        "--depth=1",
        "--filter=blob:none",
        "origin",
        commit,
        failure=f"cannot fetch commit {commit[:12]} from {source} ({hint})",
    )
    git(
        "sparse-checkout",
        "set",
        "--no-cone",
        f"/{config.upstream.subtree}/",
        failure="git sparse-checkout failed",
    )
    git(
        "checkout",
        "-q",
        "--detach",
        "FETCH_HEAD",
        failure=f"cannot check out {config.upstream.subtree} from {source} ({hint})",
    )
    subtree = clone / config.upstream.subtree
    if not subtree.is_dir():
        raise BuildError(
            f"commit {commit[:12]} in {source} has no {config.upstream.subtree}", ExitCode.VERIFY
        )
    tree = workdir / "tree"
    subtree.rename(tree)
    return tree


def _unpack_tarball(config: Config, tarball: Path, workdir: Path) -> Path:
    unpacked = workdir / "unpacked"
    unpacked.mkdir()
    try:
        with tarfile.open(tarball) as archive:
            archive.extractall(unpacked, filter="data")
    except (OSError, tarfile.TarError) as error:
        raise BuildError(
            f"cannot unpack UPSTREAM_TARBALL={tarball}: {error}", ExitCode.UPSTREAM
        ) from error
    candidates = [
        unpacked / config.upstream.subtree,
        unpacked,
        *[child for child in unpacked.iterdir() if child.is_dir()],
    ]
    for candidate in candidates:
        if candidate.is_dir() and git_tree_id(candidate) == config.upstream.tree_id:
            return candidate
    raise BuildError(
        f"UPSTREAM_TARBALL={tarball} holds no driver subtree with the pinned tree id "
        f"{config.upstream.tree_id[:12]}",
        ExitCode.UPSTREAM,
    )


def _debian_source(config: Config, workdir: Path, local: Path | None = None) -> Path:
    """The pinned paths of a Debian source package's orig tarball, at their paths; the orig
    tarball from ``local`` (a copy of it, verified by its pinned sha256) where given."""
    tarball = _cached_download(config, local)
    unpacked = workdir / "unpacked"
    unpacked.mkdir()
    run(
        [
            "tar",
            "-xf",
            str(tarball),
            "-C",
            str(unpacked),
            "--strip-components=1",
            "--wildcards",
            *[f"*/{path}" for path in config.upstream.paths],
        ],
        failure=f"{tarball.name} lacks {', '.join(config.upstream.paths)}",
        code=ExitCode.VERIFY,
    )
    return unpacked


def _cached_download(config: Config, local: Path | None = None) -> Path:
    """The orig tarball, downloaded (or copied from ``local``) once, verified by its pinned
    sha256 before it is kept."""
    upstream = config.upstream
    target = cache_root() / "sources" / upstream.source_file
    if target.is_file() and sha256_of(target) == upstream.source_sha256:
        return target
    if local is not None:
        if not local.is_file():
            raise BuildError(f"{local} does not exist: give a copy of {upstream.source_file}",
                             ExitCode.UPSTREAM)  # fmt: skip
        return download(local.resolve().as_uri(), target, upstream.source_sha256,
                        f"dkms/{config.name}.yaml")  # fmt: skip
    mirror = os.environ.get("DEBIAN_MIRROR", "").rstrip("/")
    url = upstream.source_url
    if mirror:
        url = url.replace("http://deb.debian.org/debian", mirror, 1)
    return download(url, target, upstream.source_sha256, f"dkms/{config.name}.yaml")


def download(url: str, target: Path, sha256: str | None = None, pinned_in: str = "") -> Path:
    """``url`` at ``target``, whole or not at all; with ``sha256`` (pinned in ``pinned_in``),
    kept only when the bytes match it."""
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{target.name}-", dir=target.parent)
    try:
        with os.fdopen(handle, "wb") as stream, urllib.request.urlopen(url, timeout=60) as reply:
            shutil.copyfileobj(reply, stream, 1 << 20)
        actual = sha256_of(Path(temporary))
        if sha256 is not None and actual != sha256:
            raise BuildError(
                f"{url} has sha256 {actual}, but {pinned_in} pins {sha256} (nothing was cached)",
                ExitCode.VERIFY,
            )
        Path(temporary).chmod(0o644)
        Path(temporary).replace(target)
    except (OSError, urllib.error.URLError) as error:
        raise BuildError(
            f"cannot download {url}: {getattr(error, 'reason', error)} (is the Debian archive "
            "reachable? DEBIAN_MIRROR names another mirror)",
            ExitCode.UPSTREAM,
        ) from error
    finally:
        Path(temporary).unlink(missing_ok=True)
    return target


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        while chunk := stream.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def pinned_debs(debs: list[dict], pinned_in: str) -> list[Path]:
    """Debian's .debs named by pool file and sha256 (a family's user-space builds): from the
    archive once, checked, cached."""
    from .config import debian_mirror

    found = []
    for deb in debs:
        target = _cached_deb(deb)
        if not target.is_file() or sha256_of(target) != deb["sha256"]:
            download(f"{debian_mirror()}/{deb['file']}", target, deb["sha256"], pinned_in)
        found.append(target)
    return found


def pinned_debs_cached(debs: list[dict]) -> bool:
    return all(_cached_deb(deb).is_file() for deb in debs)


def _cached_deb(deb: dict) -> Path:
    return cache_root() / "debs" / Path(deb["file"]).name
