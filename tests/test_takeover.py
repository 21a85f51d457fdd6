"""aipu-dkms among the other packagings of the same driver, installed with apt in a trixie
chroot beside stand-ins that declare what the real packages declare (name, version,
Provides): Orange Pi's cix-npu-driver and Sky1-Linux's sky1-npu-dkms are taken over (apt
removes them), radxa-pkg's cix-drivers-dkms, which builds the GPU, VPU and ISP drivers too and
merely Provides cix-npu-driver, stays installed in either order and after a purge. And the
same NPU's other driver line, aipu-compass-dkms (the real package, built here), and aipu-dkms
replace each other in either order, so one aipu.ko is built.

The stand-ins' declarations, as read in their own trees:
- cix-npu-driver 1.0.0+2503.orangepi: changelogs/changelog.cix-npu-driver of
  orangepi-xunlong/component_cix-current.
- cix-drivers-dkms 0.2.1-4: debian/control and debian/changelog of radxa-pkg/cix-drivers-dkms
  (Provides: cix-gpu-driver, cix-isp-driver-v4l2, cix-npu-driver, cix-vpu-driver).
- sky1-npu-dkms 1.0.0-2: Sky1-Linux's sky1-drivers-dkms.
"""

import re
import subprocess
from pathlib import Path

import pytest

from kernel_lab.chroot import create_chroot
from kernel_lab.suites import SUITES

from .conftest import require_chroot_support

pytestmark = [pytest.mark.upstream, pytest.mark.chroot, pytest.mark.leaves_a_core_idle]

STAND_INS = {
    "cix-npu-driver": ("1.0.0+2503.orangepi", ""),
    "sky1-npu-dkms": ("1.0.0-2", ""),
    "cix-drivers-dkms": (
        "0.2.1-4",
        "cix-gpu-driver, cix-isp-driver-v4l2, cix-npu-driver, cix-vpu-driver",
    ),
}


def stand_in(name: str, directory: Path) -> Path:
    version, provides = STAND_INS[name]
    root = directory / name
    (root / "DEBIAN").mkdir(parents=True)
    (root / f"usr/share/doc/{name}").mkdir(parents=True)
    (root / f"usr/share/doc/{name}/stand-in").write_text("a test stand-in\n", encoding="utf-8")
    control = (
        f"Package: {name}\nVersion: {version}\nArchitecture: all\n"
        "Maintainer: tests <tests@example.org>\n"
        + (f"Provides: {provides}\n" if provides else "")
        + f"Description: stand-in for {name}\n Declares what the real package declares.\n"
    )
    (root / "DEBIAN/control").write_text(control, encoding="utf-8")
    deb = directory / f"{name}.deb"
    subprocess.run(
        ["dpkg-deb", "--root-owner-group", "-b", root, deb], check=True, capture_output=True
    )
    return deb


def other_line(scratch: Path) -> Path | None:
    """aipu-compass-dkms as 'make deb' builds it, or None when its source is not cached."""
    from pipeline.config import load_package
    from pipeline.fetch import find_upstream
    from pipeline.package import build_packages

    config = load_package("aipu-compass-dkms")
    tree = find_upstream(config)
    if tree is None:
        return None
    built = build_packages(config, tree, scratch / "build", scratch / "dist", lintian=False)
    return next(path for path in built if path.name.endswith("_all.deb"))


@pytest.fixture(scope="module")
def chroot(built_packages, tmp_path_factory):
    require_chroot_support()
    scratch = tmp_path_factory.mktemp("takeover")
    debs = {name: stand_in(name, scratch) for name in STAND_INS}
    debs["aipu-dkms"] = built_packages["deb"]
    compass = other_line(scratch)
    if compass is not None:
        debs["aipu-compass-dkms"] = compass
    root = create_chroot(SUITES["trixie"], scratch / "chroot")
    try:
        with root.mounted():
            root.refresh_lists()
            for name, deb in debs.items():
                root.copy_in(deb, f"/tmp/debs/{name}.deb")
            yield root
    finally:
        root.remove()


def state(chroot, package: str) -> str:
    return chroot.run(
        ["dpkg-query", "-W", "-f=${db:Status-Abbrev}", package], check=False
    ).stdout.strip()


def apt(chroot, *arguments: str):
    return chroot.run(["apt-get", "-y", "-q", *arguments], check=False)


def clean(chroot) -> None:
    apt(chroot, "purge", "aipu-dkms", "aipu-compass-dkms", *STAND_INS)


@pytest.mark.parametrize("other", ["cix-npu-driver", "sky1-npu-dkms"])
def test_installing_takes_over_a_package_that_builds_the_same_module(chroot, other):
    clean(chroot)
    assert apt(chroot, "install", f"/tmp/debs/{other}.deb").returncode == 0
    result = apt(chroot, "install", "/tmp/debs/aipu-dkms.deb")
    assert result.returncode == 0, result.stdout + result.stderr
    assert state(chroot, "aipu-dkms") == "ii"
    assert state(chroot, other) in ("", "rc", "un"), f"{other} is still installed"


def test_cix_drivers_dkms_stays_when_aipu_dkms_comes(chroot):
    clean(chroot)
    assert apt(chroot, "install", "/tmp/debs/cix-drivers-dkms.deb").returncode == 0
    result = apt(chroot, "install", "/tmp/debs/aipu-dkms.deb")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "cix-drivers-dkms" not in _removed(result.stdout)
    assert state(chroot, "cix-drivers-dkms") == "ii"
    assert state(chroot, "aipu-dkms") == "ii"
    assert apt(chroot, "purge", "aipu-dkms").returncode == 0
    assert state(chroot, "cix-drivers-dkms") == "ii"


def test_cix_drivers_dkms_installs_beside_aipu_dkms(chroot):
    clean(chroot)
    assert apt(chroot, "install", "/tmp/debs/aipu-dkms.deb").returncode == 0
    result = apt(chroot, "install", "/tmp/debs/cix-drivers-dkms.deb")
    assert result.returncode == 0, result.stdout + result.stderr
    assert state(chroot, "aipu-dkms") == "ii"
    assert state(chroot, "cix-drivers-dkms") == "ii"


def test_an_unversioned_conflict_would_have_removed_cix_drivers_dkms(chroot, tmp_path):
    """The evidence for the versioned relation: the bare name conflicts with every package
    that Provides it, so apt would remove the GPU, VPU and ISP drivers with it."""
    clean(chroot)
    bare = tmp_path / "bare"
    subprocess.run(["dpkg-deb", "-R", chroot.path("/tmp/debs/aipu-dkms.deb"), bare], check=True)
    control = (bare / "DEBIAN/control").read_text(encoding="utf-8")
    control = control.replace("cix-npu-driver (<< 2~)", "cix-npu-driver")
    assert re.search(r"(?m)^Conflicts: .*\bcix-npu-driver(,|$)", control), control
    (bare / "DEBIAN/control").write_text(control, encoding="utf-8")
    subprocess.run(
        ["dpkg-deb", "-b", bare, chroot.path("/tmp/debs/bare.deb")], check=True, capture_output=True
    )
    assert apt(chroot, "install", "/tmp/debs/cix-drivers-dkms.deb").returncode == 0
    simulated = apt(chroot, "install", "--simulate", "/tmp/debs/bare.deb")
    assert "cix-drivers-dkms" in _removed(simulated.stdout)


def _removed(apt_output: str) -> list[str]:
    """The packages apt removes, from its simulation lines or its summary."""
    removed, in_summary = [], False
    for line in apt_output.splitlines():
        if line.startswith("Remv "):
            removed.append(line.split()[1])
        elif line.startswith("The following packages will be REMOVED"):
            in_summary = True
        elif in_summary and line.startswith(" "):
            removed += [word.rstrip("*") for word in line.split()]
        else:
            in_summary = False
    return removed


@pytest.mark.parametrize(
    ("first", "second"), [("aipu-dkms", "aipu-compass-dkms"), ("aipu-compass-dkms", "aipu-dkms")]
)
def test_the_two_driver_lines_replace_each_other(chroot, first, second):
    if chroot.run(["test", "-e", "/tmp/debs/aipu-compass-dkms.deb"], check=False).returncode:
        pytest.skip("aipu-compass-dkms's upstream tree is not in the cache: run 'make fetch'")
    clean(chroot)
    assert apt(chroot, "install", f"/tmp/debs/{first}.deb").returncode == 0
    result = apt(chroot, "install", f"/tmp/debs/{second}.deb")
    assert result.returncode == 0, result.stdout + result.stderr
    assert first in _removed(result.stdout)
    assert state(chroot, second) == "ii"
    assert state(chroot, first) in ("", "rc", "un")
    # One DKMS module aipu, of the package installed.
    registered = chroot.run(["ls", "/usr/src"], check=False).stdout.split()
    assert [name for name in registered if name.startswith("aipu-")] == [
        f"aipu-{chroot.run(['dpkg-query', '-W', '-f=${Version}', second]).stdout.split('-')[0]}"
    ]
