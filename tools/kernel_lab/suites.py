"""The Debian suites that carry arm64 kernels, as the kernel matrix knows them."""

from __future__ import annotations

from .chroot import Suite

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

# The suite the test command uses for its one-kernel end-to-end check: its dkms (>= 3.2)
# skips foreign kernels instead of failing.
DEFAULT_SUITE = "trixie"
