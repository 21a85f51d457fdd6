"""The Debian suites that carry arm64 kernels, and how the matrix picks two kernels in each."""

from __future__ import annotations

from .chroot import Suite
from .matrix import Plan

SUITES: dict[str, Suite] = {
    suite.name: suite
    for suite in (
        Suite(name="bookworm", release="bookworm", extra_suites=("bookworm-updates",)),
        Suite(name="trixie", release="trixie", extra_suites=("trixie-updates",)),
        Suite(
            name="trixie-backports",
            release="trixie",
            extra_suites=("trixie-updates", "trixie-backports"),
            target_release="trixie-backports",
        ),
        Suite(name="sid", release="sid", security=False),
        Suite(
            name="experimental",
            release="sid",
            extra_suites=("experimental",),
            security=False,
            target_release="experimental",
        ),
    )
}

# The installed kernel is the suite's current ABI, except in backports, where the previous
# ABI is installed first so the next kernel is a real version upgrade. Every flavour the
# suite carries follows. Experimental is tested only while it is ahead of sid.
PLANS: dict[str, Plan] = {
    "bookworm": Plan(SUITES["bookworm"], first="meta"),
    "trixie": Plan(SUITES["trixie"], first="meta"),
    "trixie-backports": Plan(SUITES["trixie-backports"], first="previous"),
    "sid": Plan(SUITES["sid"], first="meta"),
    "experimental": Plan(SUITES["experimental"], first="meta", newer_than="sid"),
}

# The suite the test command checks end to end: its dkms (>= 3.2) skips foreign kernels.
DEFAULT_SUITE = "trixie"
