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
    )
}

# The installed kernel is the suite's current ABI, except in backports, where the previous
# ABI is installed first so the upgrade is a real version upgrade; elsewhere the upgrade is
# another flavour of the same ABI.
PLANS: dict[str, Plan] = {
    "bookworm": Plan(SUITES["bookworm"], first="meta", upgrade="cloud-arm64"),
    "trixie": Plan(SUITES["trixie"], first="meta", upgrade="rt-arm64"),
    "trixie-backports": Plan(SUITES["trixie-backports"], first="previous", upgrade="meta"),
    "sid": Plan(SUITES["sid"], first="meta", upgrade="cloud-arm64"),
}

# The suite the test command checks end to end: its dkms (>= 3.2) skips foreign kernels.
DEFAULT_SUITE = "trixie"
