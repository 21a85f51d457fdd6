"""Which user-mode driver (libnoe or libaipudrv) works with which aipu kernel driver (KMD): the
table in driver_pairs.yaml, and the verdict on one pair with its fix."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib.resources import files

import yaml

from npuctl.doctor.findings import Status

from .versions import series, umd_from_library_name

__all__ = ["series", "table", "umd_from_library_name", "umd_from_package", "verdict"]

LIBNOE_PACKAGE = "cix-noe-umd"


@dataclass(frozen=True)
class Pair:
    kmd: str  # major.minor of the kernel driver series
    umd: str | None  # major.minor of the libnoe UMD version that speaks it, when known
    umd_package: str = ""
    umd_deb: str = ""
    changed: str = ""  # what this series changed against the libnoe before it
    instead: str = ""  # the user space and graphs this series serves instead of libnoe
    libaipudrv: str | None = None  # major.minor of the libaipudrv that speaks it
    libaipudrv_package: str = ""  # the driver package that builds this series, for it
    libnoe_packages: tuple[str, ...] = ()  # the cix-noe-umd versions known to speak it
    libnoe_evidence: str = ""
    libnoe_release: str = ""  # where that libnoe comes from
    libaipudrv_changed: str = ""  # what it changed against the libaipudrv before it
    older_libnoe: str = ""  # what an older libnoe does on it
    source: str = ""  # who ships this KMD
    unknown: str = ""  # what is not known about its pairs


@dataclass(frozen=True)
class Table:
    shipped_kmd: str  # the KMD aipu-dkms builds
    pairs: tuple[Pair, ...]

    def for_kmd(self, series: str) -> Pair | None:
        return next((pair for pair in self.pairs if pair.kmd == series), None)

    def for_umd(self, series: str) -> Pair | None:
        return next((pair for pair in self.pairs if pair.umd == series), None)

    def for_libnoe_package(self, wanted: str) -> list[Pair]:
        """The series whose libnoe packages share ``wanted``'s major.minor."""
        return [
            pair
            for pair in self.pairs
            if any(series(known) == series(wanted) for known in pair.libnoe_packages)
        ]


@dataclass(frozen=True)
class Verdict:
    status: Status
    summary: str
    detail: str = ""
    fix: str | None = None


def _text(entry: dict, key: str) -> str:
    return " ".join(str(entry.get(key) or "").split())


@cache
def table() -> Table:
    document = yaml.safe_load(files(__package__).joinpath("driver_pairs.yaml").read_text("utf-8"))
    return Table(
        str(document["shipped_kmd"]),
        tuple(
            Pair(
                kmd=str(entry["kmd"]),
                umd=None if entry.get("umd") is None else str(entry["umd"]),
                umd_package=entry.get("umd_package", ""),
                umd_deb=entry.get("umd_deb", ""),
                changed=_text(entry, "changed"),
                instead=_text(entry, "instead"),
                libaipudrv=None if entry.get("libaipudrv") is None else str(entry["libaipudrv"]),
                libaipudrv_package=str(entry.get("libaipudrv_package", "")),
                libnoe_packages=tuple(str(v) for v in entry.get("libnoe_packages", ())),
                libnoe_evidence=_text(entry, "libnoe_evidence"),
                libnoe_release=_text(entry, "libnoe_release"),
                libaipudrv_changed=_text(entry, "libaipudrv_changed"),
                older_libnoe=_text(entry, "older_libnoe"),
                source=_text(entry, "source"),
                unknown=_text(entry, "unknown"),
            )
            for entry in document["pairs"]
        ),
    )


def _key(value: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", value))


def _reload() -> str:
    return "sudo modprobe -r aipu && sudo modprobe aipu"


def _back_to_shipped(pairs: Table, kmd: str) -> str:
    shipped = pairs.for_kmd(series(pairs.shipped_kmd))
    assert shipped is not None and shipped.umd  # driver_pairs.yaml is checked by a test
    return (
        f"sudo apt install aipu-dkms && {_reload()}   # KMD {pairs.shipped_kmd}, which "
        f"libnoe {shipped.umd} speaks; remove the package or DKMS registration that built "
        f"KMD {kmd} (the DKMS finding names it)"
    )


def verdict(kmd: str, umd: str, library: str = "libnoe") -> Verdict:
    """The pair ``kmd`` (the driver's version string) and ``umd`` (the user-mode driver's,
    ``library`` being libnoe or libaipudrv) judged. A libnoe whose UMD version is not known
    is named by its package: 'cix-noe-umd 3.1.3'."""
    if library == "libaipudrv":
        return _libaipudrv_verdict(kmd, umd)
    if umd.startswith(f"{LIBNOE_PACKAGE} "):
        return _libnoe_package_verdict(kmd, umd.removeprefix(f"{LIBNOE_PACKAGE} ").strip())
    pairs = table()
    shipped = pairs.for_kmd(series(pairs.shipped_kmd))
    assert shipped is not None and shipped.umd  # driver_pairs.yaml is checked by a test
    named = f"Driver {kmd} with libnoe {umd}"
    own = pairs.for_kmd(series(kmd))
    if own is None:
        return Verdict(
            Status.WARN,
            f"{named}: a pair npuctl does not know",
            f"Known pairs: {_known(pairs)}.",
            f"sudo apt install aipu-dkms && {_reload()}   # KMD {pairs.shipped_kmd}, which "
            f"libnoe {shipped.umd} speaks",
        )
    if own.umd == series(umd):
        return Verdict(Status.OK, f"Driver {kmd}, libnoe {umd}")
    umd_series = series(umd)
    newer_than_own = own.umd is None or (
        umd_series and _key(umd_series) > _key(own.umd)  # libnoe belongs to a later KMD
    )
    speaks = pairs.for_umd(umd_series)
    reason = own.changed
    if own.umd is not None and newer_than_own:
        # What the later series that this libnoe speaks changed.
        reason = speaks.changed if speaks else "this libnoe is newer than the driver"
    detail = _libnoe_detail(umd, own, speaks)
    # The library CIX ships for the driver loaded, or else the driver the library speaks.
    if own.umd and own.umd_deb:
        fix = f"sudo npuctl provision --umd-deb {own.umd_deb}   # libnoe {own.umd}"
    elif own.libnoe_packages:
        fix = f"{_back_to_shipped(pairs, kmd)}; or keep KMD {kmd}: {_libnoe_fix(own)}"
    else:
        fix = _back_to_shipped(pairs, kmd)
    return Verdict(Status.FAIL, f"{named}: {reason}", detail, fix)


def _libnoe_detail(umd: str, own: Pair, speaks: Pair | None) -> str:
    detail = (
        f"libnoe {umd} speaks KMD {speaks.kmd}."
        if speaks
        else f"npuctl knows no KMD that libnoe {umd} speaks."
    )
    if own.umd:
        detail += f" KMD {own.kmd} needs libnoe {own.umd} ({own.umd_package})."
    elif own.libnoe_packages:
        detail += f" KMD {own.kmd} needs {_libnoe_of(own)}."
    if own.source:
        detail += f" KMD {own.kmd} comes from {own.source}."
    if own.instead:
        detail += f" {own.instead}"
    if own.unknown:
        detail += f" Not known: {own.unknown}."
    return detail


def _libnoe_of(pair: Pair) -> str:
    versions = " or ".join(pair.libnoe_packages)
    return f"{LIBNOE_PACKAGE} {versions} ({pair.libnoe_evidence})"


def _libnoe_fix(pair: Pair) -> str:
    if pair.umd_deb:
        return f"sudo npuctl provision --umd-deb {pair.umd_deb}   # libnoe {pair.umd}"
    return (
        f"install {LIBNOE_PACKAGE} {' or '.join(pair.libnoe_packages)} of "
        f"{pair.libnoe_release}, the libnoe of KMD {pair.kmd} (its Python wheels need "
        "Python < 3.13; its C library, which npuctl uses, does not)"
    )


def _libnoe_package_verdict(kmd: str, package: str) -> Verdict:
    """A libnoe known by its package's version only (CIX's 26Q1 and 26Q2 releases)."""
    pairs = table()
    named = f"Driver {kmd} with libnoe of {LIBNOE_PACKAGE} {package}"
    own = pairs.for_kmd(series(kmd))
    speaks = pairs.for_libnoe_package(series(package))
    spoken = " and ".join(f"KMD {pair.kmd}" for pair in speaks) or "no KMD npuctl knows"
    if own is None:
        return Verdict(
            Status.WARN,
            f"{named}: a pair npuctl does not know",
            f"Known pairs: {_known(pairs)}.",
            None,
        )
    if package in own.libnoe_packages:
        return Verdict(Status.OK, f"Driver {kmd}, libnoe of {LIBNOE_PACKAGE} {package}",
                       f"Known from: {own.libnoe_evidence}.")  # fmt: skip
    same_series = any(series(known) == series(package) for known in own.libnoe_packages)
    if not own.libnoe_packages or not speaks or same_series:
        known = (
            f" KMD {own.kmd} is known to work with {_libnoe_of(own)}."
            if own.libnoe_packages
            else ""
        )
        return Verdict(
            Status.WARN,
            f"{named}: a pair npuctl does not know",
            f"This libnoe's series is known with {spoken}.{known}"
            + (f" Not known: {own.unknown}." if own.unknown else ""),
            _libnoe_fix(own)
            if own.libnoe_packages
            else (_libnoe_fix(speaks[-1]) if speaks else None),
        )
    newer = _key(package) > _key(own.libnoe_packages[-1])
    if newer:
        reason = (
            f"a libnoe of {spoken} on KMD {own.kmd}: the driver does not answer its ioctls, so "
            "it fails at its first call (query capability), which looks like a dead NPU but is "
            "a version mismatch"
        )
    else:
        reason = own.older_libnoe or own.changed
    detail = f"This libnoe speaks {spoken}; KMD {own.kmd} needs {_libnoe_of(own)}."
    if own.source:
        detail += f" KMD {own.kmd} comes from {own.source}."
    fix = f"{_libnoe_fix(own)}; or keep this libnoe and load the KMD it speaks: " + " or ".join(
        pair.source for pair in speaks
    )
    return Verdict(Status.FAIL, f"{named}: {reason}", detail, fix)


def _libaipudrv_verdict(kmd: str, umd: str) -> Verdict:
    """Arm China's libaipudrv numbers its versions as its KMD does: the same series pairs."""
    pairs = table()
    named = f"Driver {kmd} with libaipudrv {umd}"
    own = pairs.for_kmd(series(kmd))
    if own is not None and own.libaipudrv == series(umd):
        return Verdict(Status.OK, f"Driver {kmd}, libaipudrv {umd}")
    packaged = next((pair for pair in pairs.pairs if pair.libaipudrv_package), None)
    fix = (
        f"sudo apt install {packaged.libaipudrv_package} libaipudrv6 && {_reload()}   "
        f"# KMD {packaged.kmd} with libaipudrv {packaged.libaipudrv}, which speak each other"
        if packaged
        else None
    )
    speaks = next((pair for pair in pairs.pairs if pair.libaipudrv == series(umd)), None)
    if own is not None and own.libaipudrv is not None and speaks is not None:
        # Two 6.x series: the later one's changes separate them.
        later = max(own, speaks, key=lambda pair: _key(pair.kmd))
        return Verdict(
            Status.FAIL,
            f"{named}: {later.libaipudrv_changed}",
            f"libaipudrv {umd} speaks KMD {speaks.kmd}; KMD {own.kmd} needs libaipudrv "
            f"{own.libaipudrv}.",
            fix,
        )
    if own is None or (own.libaipudrv is None and _key(own.kmd) < (6,)):
        # A 5.x KMD: libaipudrv's first call, AIPU_IOCTL_QUERY_CAP, has another number there.
        reason = (
            "libaipudrv speaks Arm China's 6.x ioctls (struct aipu_cap of 200 bytes, where "
            "KMD 5.11's is 424), so its first call gets ENOTTY"
        )
        if own is None and _key(series(kmd)) >= (6,):
            return Verdict(
                Status.WARN,
                f"{named}: a pair npuctl does not know",
                f"Known pairs: {_known(pairs)}.",
                fix,
            )
        return Verdict(Status.FAIL, f"{named}: {reason}", "docs/driver-lines.md", fix)
    known = f"KMD {own.kmd} pairs with libaipudrv {own.libaipudrv}." if own.libaipudrv else ""
    unknown = f" Not known: {own.unknown}." if own.unknown else ""
    return Verdict(Status.WARN, f"{named}: a pair npuctl does not know", known + unknown, fix)


def _known(pairs: Table) -> str:
    def libnoe(pair: Pair) -> str:
        if pair.umd:
            return f"libnoe {pair.umd}"
        if pair.libnoe_packages:
            return f"{LIBNOE_PACKAGE} {' or '.join(pair.libnoe_packages)}"
        return "no libnoe known"

    return ", ".join(
        f"KMD {pair.kmd} with {libnoe(pair)}"
        + (f" or libaipudrv {pair.libaipudrv}" if pair.libaipudrv else "")
        for pair in pairs.pairs
    )


def umd_from_package(version: str) -> str:
    """libnoe's major.minor for a cix-noe-umd package version, when the table names it; else
    the package itself ('cix-noe-umd 3.1.3') where a KMD series names its series."""
    upstream = version.split(":")[-1].split("-")[0]
    for pair in table().pairs:
        if pair.umd and pair.umd_package.split()[-1] == upstream:
            return pair.umd
    if table().for_libnoe_package(upstream):
        return f"{LIBNOE_PACKAGE} {upstream}"
    return ""
