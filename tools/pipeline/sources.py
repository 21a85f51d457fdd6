"""Where each package's pinned upstream is fetched from when not from its own repository.

The driver packages come from different upstreams (aipu-dkms from Orange Pi's
component_cix-current, aipu-compass-dkms from Arm China's Compass_NPU_Driver, rocket-dkms from
Debian's archive), so a local copy is named per package: ``UPSTREAM_GIT_<PACKAGE>`` (a clone's
path or a URL) or ``UPSTREAM_TARBALL_<PACKAGE>``, the package's name in capitals with '_' for
'-' (``UPSTREAM_GIT_AIPU_COMPASS_DKMS``). The plain ``UPSTREAM_GIT`` / ``UPSTREAM_TARBALL``
serve every package that names none of its own: with one driver package that is enough.
A file pinned from a repository (the driver-line tests' headers and libnoe .deb) is fetched
through the variable of the package whose upstream is that repository.
"""

from __future__ import annotations

import os
from pathlib import Path


def variable(kind: str, package: str) -> str:
    """``UPSTREAM_GIT_AIPU_DKMS`` for kind GIT and package aipu-dkms."""
    return f"UPSTREAM_{kind}_{package.upper().replace('-', '_')}"


def _chosen(kind: str, package: str) -> tuple[str, str] | None:
    for name in (variable(kind, package), f"UPSTREAM_{kind}"):
        value = os.environ.get(name, "")
        if value:
            return name, value
    return None


def git_source(package: str) -> tuple[str, str] | None:
    """(the variable, its value): the git source given for ``package``, or None."""
    return _chosen("GIT", package)


def tarball(package: str) -> tuple[str, Path] | None:
    chosen = _chosen("TARBALL", package)
    return None if chosen is None else (chosen[0], Path(chosen[1]))


def _same_repository(first: str, second: str) -> bool:
    def plain(url: str) -> str:
        return url.rstrip("/").removesuffix(".git").lower()

    return plain(first) == plain(second)


def git_source_for_repository(repository: str) -> str:
    """The git source given for the package whose upstream is ``repository``, else the
    plain UPSTREAM_GIT, else ''."""
    from .config import load_package, package_names

    for package in package_names():
        upstream = load_package(package).upstream
        if upstream.repository and _same_repository(upstream.repository, repository):
            own = os.environ.get(variable("GIT", package), "")
            if own:
                return own
    return os.environ.get("UPSTREAM_GIT", "")
