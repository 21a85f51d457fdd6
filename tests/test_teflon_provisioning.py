"""A trixie board gets the Teflon that adds right from npuctl provision, safely: in an arm64
trixie chroot (qemu-user) with trixie-backports, as an Orange Pi 5 Plus has it today, Mesa
26.1 installed from backports; then this project's apt repository (its trixie suite and the
trixie-teflon suite that carries the rocket family's wanted Teflon build) is added, npuctl
installed from it, and provision's Teflon actions run as a user runs them (--dry-run first).
Afterwards the board has the wanted Teflon and its libdrm and nothing else from sid or
trixie-teflon, 'apt upgrade' neither pulls anything more nor drops Teflon back to 26.1, and
purging npuctl removes every file provision wrote."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pipeline.repository import KEYRING_FILE

pytestmark = [pytest.mark.upstream, pytest.mark.chroot]

ROOT = Path(__file__).resolve().parents[1]
TEFLON = yaml.safe_load(
    (ROOT / "npuctl/src/npuctl/platforms/rocket/teflon.yaml").read_text(encoding="utf-8")
)
WANTED = next(build for build in TEFLON["builds"] if build["version"] == TEFLON["wanted"])
BACKPORTS = next(build for build in TEFLON["builds"] if build["suite"] == "trixie-backports")
SUITE = TEFLON["repository_suite"]
ACTIONS = ("--only", "backports", "--only", "teflon-pin", "--only", "teflon")
# What the board runs, in its root, once npuctl is installed; each step's output is kept in
# /results/<step> for the assertions.
STEPS = f"""
set -eu
mkdir -p /results
q() {{ dpkg-query -W -f '${{Package}} ${{Version}}\\n' "$@"; }}
apt-get update -q
apt-get install -y -q -t trixie-backports {TEFLON["package"]}
q {TEFLON["package"]} libdrm2 > /results/before
# Byte-compiling Python's modules is most of npuctl's install under qemu-user and nothing
# here depends on it: the packages' own py3compile calls find a stub in its place.
dpkg-divert --quiet --local --rename --divert /usr/bin/py3compile.real --add /usr/bin/py3compile
printf '#!/bin/sh\\nexit 0\\n' > /usr/bin/py3compile && chmod 755 /usr/bin/py3compile
apt-get install -y -q --no-install-recommends npuctl
npuctl --platform rocket provision --dry-run {" ".join(ACTIONS)} > /results/dry-run
npuctl --platform rocket provision {" ".join(ACTIONS)} > /results/provision
q {" ".join(deb["package"] for deb in WANTED["debs"])} > /results/after
ls /etc/apt/preferences.d /etc/apt/sources.list.d > /results/apt-files-provisioned
apt-get upgrade -y -q > /results/upgrade
q {" ".join(deb["package"] for deb in WANTED["debs"])} > /results/after-upgrade
apt-get purge -y -q npuctl
ls /etc/apt/preferences.d /etc/apt/sources.list.d > /results/apt-files-purged
test -e /var/lib/npuctl/site-files && echo kept > /results/record || echo gone > /results/record
q {TEFLON["package"]} > /results/after-purge
"""


@pytest.fixture(scope="module")
def published(npuctl_debs, tmp_path_factory) -> Path:
    """The project's repository with npuctl's packages and the trixie-teflon suite."""
    if shutil.which("aptly") is None:
        pytest.skip("aptly is not installed: run 'make deps'")
    site = tmp_path_factory.mktemp("site")
    result = subprocess.run(
        [
            sys.executable, "-m", "pipeline", "repo",
            "--dist", str(npuctl_debs["npuctl"].parent),
            "--repo", str(site / "repo"), "--work", str(site / "work"),
        ],
        capture_output=True, text=True, cwd=ROOT, check=False, timeout=900,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return site / "repo"


def test_the_repository_carries_the_wanted_teflon_in_a_suite_followed_only_when_pinned(
    published,
):
    release = (published / f"dists/{SUITE}/Release").read_text()
    assert f"Codename: {SUITE}\n" in release
    assert "NotAutomatic: yes\n" in release and "ButAutomaticUpgrades: yes\n" in release
    packages = (published / f"dists/{SUITE}/main/binary-arm64/Packages").read_text()
    for deb in WANTED["debs"]:
        stanza = packages.split(f"Package: {deb['package']}\n", 1)[1].split("\n\n", 1)[0]
        assert f"Version: {deb['version']}\n" in stanza
        assert f"SHA256: {deb['sha256']}\n" in stanza  # Debian's own build, as pinned
    # npuctl provision's pin follows this suite for exactly these packages.
    pin = (ROOT / "npuctl/src/npuctl/platforms/rocket/site-files/npuctl-teflon.pref").read_text()
    wanted = " ".join(deb["package"] for deb in WANTED["debs"])
    assert f"Package: {wanted}\nPin: release n={SUITE}\n" in pin


def _arm64_chroot_or_skip() -> None:
    from oci_image import rootfs
    from oci_image.errors import ImageError

    if os.geteuid() != 0:
        pytest.skip("the arm64 chroot needs root (mmdebstrap, binfmt)")
    try:
        rootfs.tool("mmdebstrap", "mmdebstrap")
        rootfs.check_emulation("arm64")
    except ImageError as error:
        pytest.skip(str(error))


def test_provision_upgrades_a_trixie_board_to_the_wanted_teflon_and_purge_restores(
    published, tmp_path
):
    from oci_image import rootfs

    _arm64_chroot_or_skip()
    steps = tmp_path / "steps.sh"
    steps.write_text(STEPS, encoding="utf-8")
    source = (
        f"Types: deb\nURIs: file:/srv/aipu\nSuites: trixie {SUITE}\nComponents: main\n"
        f"Signed-By: /usr/share/keyrings/{KEYRING_FILE}\n"
    )
    (tmp_path / "aipu.sources").write_text(source, encoding="utf-8")
    root, log = tmp_path / "board", tmp_path / "board.log"
    command = [
        "mmdebstrap", "--mode=root", "--variant=apt", "--arch=arm64", "--format=directory",
        *(f"--dpkgopt={option}" for option in rootfs.DPKG_OPTIONS),
        f"--customize-hook=copy-in {published} /srv",
        f'--customize-hook=mv "$1/srv/{published.name}" "$1/srv/aipu"',
        f"--customize-hook=copy-in {published / KEYRING_FILE} /usr/share/keyrings",
        f"--customize-hook=copy-in {tmp_path / 'aipu.sources'} /etc/apt/sources.list.d",
        f"--customize-hook=copy-in {steps} /",
        '--customize-hook=chroot "$1" sh /steps.sh',
        "trixie", str(root),
        *(f"deb {rootfs.mirror()} {suite} main" for suite in ("trixie", "trixie-backports")),
    ]  # fmt: skip
    with log.open("w", encoding="utf-8") as output:
        done = subprocess.run(command, stdout=output, stderr=subprocess.STDOUT, check=False)
    text = log.read_text(encoding="utf-8", errors="replace")
    assert done.returncode == 0, text[-3000:]

    def result(step: str) -> str:
        return (root / "results" / step).read_text(encoding="utf-8")

    def versions(step: str) -> dict[str, str]:
        return dict(line.split() for line in result(step).splitlines())

    assert versions("before")[TEFLON["package"]] == BACKPORTS["version"]
    dry_run = result("dry-run")
    assert f"Pin: release n={SUITE}" in dry_run and "apt-get install -y" in dry_run
    assert "[done] teflon" in result("provision"), result("provision")
    wanted = {deb["package"]: deb["version"] for deb in WANTED["debs"]}
    assert versions("after") == wanted
    assert "npuctl-teflon.pref" in result("apt-files-provisioned")
    # 'apt upgrade' changes none of them, and nothing else on the board is from sid or
    # trixie-teflon: every other package is trixie's, backports' or the project's.
    assert versions("after-upgrade") == wanted
    assert "0 upgraded, 0 newly installed, 0 to remove" in result("upgrade"), result("upgrade")
    # Purging npuctl takes provision's files with it; the Teflon stays as installed.
    purged = result("apt-files-purged")
    assert "npuctl-teflon.pref" not in purged and "npuctl-trixie-backports" not in purged
    assert result("record").strip() == "gone"
    assert versions("after-purge")[TEFLON["package"]] == WANTED["version"]
