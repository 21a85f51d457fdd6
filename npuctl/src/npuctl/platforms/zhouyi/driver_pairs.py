"""Which libnoe (UMD) works with which aipu kernel driver (KMD): the table in
driver_pairs.yaml, and the verdict on one pair with its fix."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib.resources import files

import yaml

from npuctl.doctor.findings import Status


@dataclass(frozen=True)
class Pair:
    kmd: str  # major.minor of the kernel driver series
    umd: str | None  # major.minor of the libnoe that speaks it; None: none published
    umd_package: str = ""
    umd_deb: str = ""
    changed: str = ""  # what this series changed against the UMD before it
    instead: str = ""  # the user space and graphs this series serves instead of libnoe
    libaipudrv: str | None = None  # major.minor of the libaipudrv that speaks it
    libaipudrv_package: str = ""  # the driver package that builds this series, for it


@dataclass(frozen=True)
class Table:
    shipped_kmd: str  # the KMD aipu-dkms builds
    pairs: tuple[Pair, ...]

    def for_kmd(self, series: str) -> Pair | None:
        return next((pair for pair in self.pairs if pair.kmd == series), None)

    def for_umd(self, series: str) -> Pair | None:
        return next((pair for pair in self.pairs if pair.umd == series), None)


@dataclass(frozen=True)
class Verdict:
    status: Status
    summary: str
    detail: str = ""
    fix: str | None = None


@cache
def table() -> Table:
    document = yaml.safe_load(files(__package__).joinpath("driver_pairs.yaml").read_text("utf-8"))
    return Table(
        str(document["shipped_kmd"]),
        tuple(
            Pair(
                str(entry["kmd"]),
                None if entry.get("umd") is None else str(entry["umd"]),
                entry.get("umd_package", ""),
                entry.get("umd_deb", ""),
                " ".join(str(entry.get("changed", "")).split()),
                " ".join(str(entry.get("instead", "")).split()),
                None if entry.get("libaipudrv") is None else str(entry["libaipudrv"]),
                str(entry.get("libaipudrv_package", "")),
            )
            for entry in document["pairs"]
        ),
    )


def series(version: str) -> str:
    """'5.11' of '5.11.0', '5.11.0-012345678' or '5.11.0+git20251022.66bfa0e-1'; '' if none."""
    match = re.match(r"\s*v?(\d+)\.(\d+)", version)
    return f"{match[1]}.{match[2]}" if match else ""


def _key(value: str) -> tuple[int, ...]:
    return tuple(int(part) for part in value.split("."))


def verdict(kmd: str, umd: str, library: str = "libnoe") -> Verdict:
    """The pair ``kmd`` (the driver's version string) and ``umd`` (the user-mode driver's,
    ``library`` being libnoe or libaipudrv) judged."""
    if library == "libaipudrv":
        return _libaipudrv_verdict(kmd, umd)
    pairs = table()
    shipped = pairs.for_kmd(series(pairs.shipped_kmd))
    assert shipped is not None and shipped.umd  # driver_pairs.yaml is checked by a test
    named = f"Driver {kmd} with libnoe {umd}"
    reload = "sudo modprobe -r aipu && sudo modprobe aipu"
    own = pairs.for_kmd(series(kmd))
    if own is None:
        return Verdict(
            Status.WARN,
            f"{named}: a pair npuctl does not know",
            f"Known pairs: {_known(pairs)}.",
            f"sudo apt install aipu-dkms && {reload}   # KMD {pairs.shipped_kmd}, which "
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
    detail = (
        f"libnoe {umd} speaks KMD {speaks.kmd}."
        if speaks
        else f"npuctl knows no KMD that libnoe {umd} speaks."
    )
    if own.umd:
        detail += f" KMD {own.kmd} needs libnoe {own.umd} ({own.umd_package})."
    if own.instead:
        detail += f" {own.instead}"
    # The library CIX ships for the driver loaded, or else the driver the library speaks.
    if own.umd and own.umd_deb:
        fix = f"sudo npuctl provision --umd-deb {own.umd_deb}   # libnoe {own.umd}"
    else:
        fix = (
            f"sudo apt install aipu-dkms && {reload}   # KMD {pairs.shipped_kmd}, which "
            f"libnoe {shipped.umd} speaks; remove the package that built KMD {kmd} "
            "(dkms status names it)"
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
        f"sudo apt install {packaged.libaipudrv_package} && sudo modprobe -r aipu && "
        f"sudo modprobe aipu   # KMD {packaged.kmd}, which libaipudrv {packaged.libaipudrv} speaks"
        if packaged
        else None
    )
    if own is None or own.libaipudrv is None:
        # A 5.x KMD: libaipudrv's first call, AIPU_IOCTL_QUERY_CAP, has another number there.
        reason = (
            "libaipudrv speaks Arm China's 6.x ioctls (struct aipu_cap of 200 bytes, where "
            "KMD 5.11's is 424), so its first call gets ENOTTY"
        )
        return Verdict(Status.FAIL, f"{named}: {reason}", "docs/driver-lines.md", fix)
    return Verdict(
        Status.WARN,
        f"{named}: a pair npuctl does not know",
        f"KMD {own.kmd} pairs with libaipudrv {own.libaipudrv}.",
        fix,
    )


def _known(pairs: Table) -> str:
    return ", ".join(
        f"KMD {pair.kmd} with libnoe {pair.umd or '(none published)'}" for pair in pairs.pairs
    )


def umd_from_library_name(name: str, library: str = "libnoe") -> str:
    """'0.6.0' of libnoe.so.0.6.0 (the real file behind libnoe.so), '6.1.0' of
    libaipudrv.so.6.1.0 for library libaipudrv; '' otherwise."""
    match = re.fullmatch(rf"{re.escape(library)}\.so\.(\d+\.\d+\.\d+)", name)
    return match[1] if match else ""


def umd_from_package(version: str) -> str:
    """libnoe's major.minor for a cix-noe-umd package version, when the table names it."""
    for pair in table().pairs:
        if pair.umd and pair.umd_package.split()[-1] == version.split("-")[0]:
            return pair.umd
    return ""
