"""The NPU families npuctl supports, one package each under npuctl/platforms/: named by the
driver descriptions (drivers.json, from dkms/<package>.yaml's npuctl_platform) and imported
when asked for, so nothing shared imports or names a family."""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from .drivers import all_drivers
from .errors import ExitCode, NpuctlError
from .platform import Platform

if TYPE_CHECKING:
    from .system import System


def platform_names() -> tuple[str, ...]:
    """Every family a driver package serves, in the order of the drivers' descriptions."""
    return tuple(dict.fromkeys(driver.platform for driver in all_drivers()))


def all_platforms() -> list[Platform]:
    return [
        importlib.import_module(f"npuctl.platforms.{name}").PLATFORM for name in platform_names()
    ]


def by_name(name: str) -> Platform:
    for platform in all_platforms():
        if platform.name == name:
            return platform
    known = ", ".join(platform_names())
    raise NpuctlError(f"unknown platform {name!r}; known: {known}", ExitCode.USAGE)


def detect(system: System) -> tuple[Platform, str] | None:
    """The NPU family this machine has and where it is described, or None."""
    if system.machine() not in ("aarch64", "arm64"):
        return None
    for platform in all_platforms():
        where = platform.locate(system)
        if where is not None:
            return platform, where
    return None


def chosen(system: System, forced: str | None = None) -> Platform | None:
    """--platform (or NPUCTL_PLATFORM) if given, else the detected family."""
    forced = forced or os.environ.get("NPUCTL_PLATFORM")
    if forced:
        return by_name(forced)
    found = detect(system)
    return found[0] if found else None


def able(forced: str | None, can: Callable[[Platform], bool], what: str) -> Platform:
    """--platform if given, else the NPU of this machine, else the first family that ``can``
    (so the doubles and --library work on any machine, as 'npuctl run' does); a family that
    cannot is a usage error naming those that can."""
    from .system import System

    found = detect(System())
    platform = by_name(forced) if forced else (found[0] if found else None)
    if platform is None:
        platform = next(p for p in all_platforms() if can(p))
    if not can(platform):
        families = ", ".join(p.name for p in all_platforms() if can(p))
        raise NpuctlError(
            f"npuctl {what} nothing on the {platform.title} yet; it does on: {families}",
            ExitCode.USAGE,
        )
    return platform


def absent_reasons() -> str:
    return "; ".join(f"{p.absent} ({p.title})" for p in all_platforms())


def embedding_platform(forced: str | None) -> Platform:
    """The family that embeds in-process ('npuctl watch')."""
    return able(forced, lambda platform: platform.embeds, "embeds")
