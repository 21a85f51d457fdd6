"""The test command's slice of the kernel matrix: one Debian suite end to end on its real
arm64 kernels. Install with apt (DKMS builds; dkms status, modinfo version and vermagic are
checked), kernel upgrade to the 16k-page flavour (the headers' hook rebuilds), a foreign
amd64 kernel and an older suite's arm64 kernel (both skipped, apt succeeds), package
upgrade, purge (nothing left), QEMU boots of both page sizes with the DKMS-built module, a
-Werror kbuild, and UEFI/ACPI boots with complete and incomplete descriptions of the NPU.
rocket-dkms goes through the same steps beside it: trixie's kernels lack the DRM accel core,
so every one of them must be skipped cleanly (no module, no failed DKMS state, apt exit 0).
The full matrix, every flavour of every suite, is 'make check-kernels'."""

import dataclasses
import functools
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from kernel_lab import distribution_kernels
from kernel_lab.drivers import DRIVERS
from kernel_lab.matrix import Packages, SuiteRun
from kernel_lab.suites import DEFAULT_SUITE, PLANS
from pipeline.config import load_package
from pipeline.fetch import find_upstream
from pipeline.package import build_packages
from pipeline.patching import patched_copy

from .conftest import require_chroot_support, started_beside

pytestmark = [pytest.mark.upstream, pytest.mark.chroot]


def start_beside_the_tests(request, cancel: threading.Event) -> Callable[[], SuiteRun]:
    """The run keeps about a core busy for four minutes (cross builds, QEMU boots): it starts
    with the session and runs beside the other tests. Here, in the session's thread: whether
    it can run, and the packages under test; the thread builds the rest and runs the lab."""
    require_chroot_support()
    config, upstream_tree, built_packages, tmp_path_factory = (
        request.getfixturevalue(name)
        for name in ("config", "upstream_tree", "built_packages", "tmp_path_factory")
    )
    scratch = tmp_path_factory.mktemp("lifecycle")
    rocket_tree = find_upstream(load_package("rocket-dkms"))
    if rocket_tree is None:
        pytest.skip("rocket source not in the cache: run 'make fetch'")
    return functools.partial(
        _suite_run, config, upstream_tree, built_packages, rocket_tree, scratch, cancel
    )


@pytest.fixture(scope="module")
def suite_run(request) -> SuiteRun:
    return started_beside(request)


def _suite_run(
    config, upstream_tree, built_packages, rocket_tree, scratch, cancel: threading.Event
) -> SuiteRun:
    following = config.with_local_suffix("lab1")
    next_deb = next(
        path
        for path in build_packages(
            following, upstream_tree, scratch / "next-build", scratch / "next", lintian=False
        )
        if path.suffix == ".deb"
    )
    packages = Packages(
        deb=built_packages["deb"],
        version=config.version,
        next_deb=next_deb,
        next_version=following.version,
        patched_tree=patched_copy(upstream_tree, scratch / "src", config.patches_dir),
        driver=DRIVERS[config.name],
        gate=config.kernel_config_gate,
        kernel_regex=config.kernel_regex,
        board_files=tuple(board_file.installed_path for board_file in config.board_files),
    )
    plan = dataclasses.replace(PLANS[DEFAULT_SUITE], flavours=("arm64", "arm64-16k"))
    # One simulated distribution kernel on this suite's kernel: Sky1-Linux's symbol for the
    # NPU driver in its tree (the full matrix derives it from trixie-backports).
    sky1 = next(kernel for kernel in distribution_kernels.load() if kernel.name == "sky1-linux")
    # On the default suite's kernel rocket's reason is the accel core, not the in-tree driver.
    sky1 = dataclasses.replace(sky1, base_suite=DEFAULT_SUITE)
    rocket = _rocket(rocket_tree, scratch)
    rocket = dataclasses.replace(
        rocket,
        driver=dataclasses.replace(
            rocket.driver, distribution_kernels={sky1.name: ("CONFIG_DRM_ACCEL is off",)}
        ),
    )
    demo = _third_family(scratch)
    run = SuiteRun(
        plan, [packages, rocket, demo], scratch / "lab", scratch / "lab.log", [sky1], cancel
    )
    run.run()
    return run


def _third_family(scratch) -> Packages:
    """The invented family of tests/third_family.py, built by its scratch tree's pipeline,
    read by the kernel lab from its scratch description as it reads every package's."""
    from kernel_lab.drivers import from_config
    from pipeline.config import load_config

    from .third_family import PACKAGE, build_deb, make_scratch

    tree = make_scratch(scratch / "third-family")
    config = load_config(tree.tree / f"dkms/{PACKAGE}.yaml")
    deb = build_deb(tree, scratch / "demo-dist", lintian=False)
    following = build_deb(tree, scratch / "demo-next", suffix="lab1", lintian=False)
    patched = tree.python(
        "-m", "pipeline", "--package", PACKAGE, "patch", str(scratch / "demo-src")
    )
    assert patched.returncode == 0, patched.stderr
    return Packages(
        deb=deb,
        version=config.version,
        next_deb=following,
        next_version=f"{config.version}+lab1",
        patched_tree=scratch / "demo-src",
        driver=from_config(config),
        gate=config.kernel_config_gate,
        kernel_regex=config.kernel_regex,
        board_files=tuple(board_file.installed_path for board_file in config.board_files),
    )


def _rocket(tree: Path, scratch: Path) -> Packages:
    rocket = load_package("rocket-dkms")
    builds = {}
    for config in (rocket, rocket.with_local_suffix("lab1")):
        artifacts = build_packages(
            config, tree, scratch / f"r-{config.version}", scratch / "rdist", lintian=False
        )
        builds[config.version] = next(path for path in artifacts if path.suffix == ".deb")
    return Packages(
        deb=builds[rocket.version],
        version=rocket.version,
        next_deb=builds[f"{rocket.version}+lab1"],
        next_version=f"{rocket.version}+lab1",
        patched_tree=patched_copy(tree, scratch / "rocket-src", rocket.patches_dir),
        driver=DRIVERS["rocket-dkms"],
        gate=rocket.kernel_config_gate,
        kernel_regex=rocket.kernel_regex,
        board_files=tuple(board_file.installed_path for board_file in rocket.board_files),
    )


def _debian_rows(run, package="aipu-dkms"):
    """The rows of Debian's own kernels (not the simulated distribution kernel)."""
    return [
        row for row in run.rows if row.package == package and row.role in ("installed", "upgrade")
    ]


def _cell(run, role, column, package="aipu-dkms"):
    row = next(row for row in run.rows if row.role == role and row.package == package)
    return row.cells[column]


@pytest.mark.parametrize(
    ("role", "column"),
    [
        ("installed", "build"),
        ("installed", "warnings"),
        ("upgrade", "autoinstall"),
        ("upgrade", "warnings"),
        ("upgrade", "qemu"),
        ("installed", "qemu"),
        ("installed", "acpi"),
        ("installed", "foreign-skip"),
        ("installed", "old-kernel-skip"),
        ("installed", "package-upgrade"),
        ("installed", "purge"),
    ],
)
def test_step_succeeds(suite_run, role, column):
    cell = _cell(suite_run, role, column)
    assert cell.status == "ok", f"{column}: {cell.detail} (log: {suite_run.log_path})"


def test_warnings_come_from_a_werror_build_then_from_dkms_own_log(suite_run):
    """The installed kernel gets a real -Werror compile; the next flavour's warnings are
    read from the make.log DKMS kept, not from a second compile."""
    assert "KCFLAGS=-Werror" in _cell(suite_run, "installed", "warnings").detail
    upgrade = _cell(suite_run, "upgrade", "warnings")
    assert upgrade.detail == "0 compiler and 0 modpost warnings in DKMS's build log"


def test_installed_module_carries_the_package_version(suite_run, config):
    detail = _cell(suite_run, "installed", "build").detail
    assert "/updates/dkms/aipu.ko" in detail
    # Debian's kernel has none of CIX's SCMI helpers: the devfreq code is compiled out.
    assert f"version {config.version}, devfreq off" in detail
    # The IOVA reservation follows the headers' struct iommu_domain, not the version: this
    # suite's 6.12 has no cookie_type yet (the driver's cookie copy holds), so it is built in.
    assert ", iova-reservation on (include/linux/iommu.h lacks " in detail, detail


def test_the_upgrade_is_the_16k_flavour_of_the_same_abi(suite_run):
    kernels = [row.kernel for row in _debian_rows(suite_run)]
    assert len(kernels) == 2
    assert kernels[0].endswith("-arm64")
    assert kernels[1] == kernels[0] + "-16k"


def test_the_old_kernel_is_older_than_the_minimum(suite_run, config):
    detail = _cell(suite_run, "installed", "old-kernel-skip").detail
    assert "5.10" in detail and "older than kernel.min" in detail


def test_each_boot_refuses_the_other_kernels_module(suite_run):
    rows = _debian_rows(suite_run)
    kernels = [row.kernel for row in rows]
    for row, other in zip(rows, reversed(kernels), strict=True):
        assert f"the module built for {other} refused" in row.cells["qemu"].detail


def test_every_acpi_description_behaves(suite_run):
    parts = _cell(suite_run, "installed", "acpi").parts
    assert set(parts) == {
        "full",
        "no-power-domains",
        "no-irq",
        "no-memory",
        "no-core-mask",
        "mask-exceeds-domains",
    }
    assert all(result.startswith("ok: ") for result in parts.values()), parts
    assert "firmware description incomplete" in parts["no-power-domains"]
    assert "unidentified hardware version" in parts["full"]


@pytest.mark.parametrize("role", ["installed", "upgrade"])
def test_rocket_skips_kernels_without_the_accel_core(suite_run, role):
    cell = _cell(suite_run, role, "build", "rocket-dkms")
    assert cell.status == "excluded", cell.detail
    assert "CONFIG_DRM_ACCEL is off" in cell.detail


@pytest.mark.parametrize("column", ["foreign-skip", "old-kernel-skip", "package-upgrade", "purge"])
def test_rocket_life_cycle_beside_aipu(suite_run, column):
    cell = _cell(suite_run, "installed", column, "rocket-dkms")
    assert cell.status == "ok", f"{column}: {cell.detail} (log: {suite_run.log_path})"


@pytest.mark.parametrize("package", ["aipu-dkms", "rocket-dkms"])
def test_a_simulated_distribution_kernel_is_skipped_for_its_reasons(suite_run, package):
    row = next(
        row
        for row in suite_run.rows
        if row.role.startswith("simulated:") and row.package == package
    )
    assert row.kernel.endswith("-sim-sky1")
    assert row.cells["build"].status == "excluded", row.cells["build"].detail
    assert row.cells["autoinstall"].status == "ok"
    assert row.cells["autoinstall"].detail.startswith("apt exit 0, headers configured")


@pytest.mark.parametrize(
    ("role", "column"),
    [
        ("installed", "build"),
        ("installed", "warnings"),
        ("upgrade", "autoinstall"),
        ("installed", "qemu"),
        ("upgrade", "qemu"),
        ("installed", "foreign-skip"),
        ("installed", "old-kernel-skip"),
        ("installed", "package-upgrade"),
        ("installed", "purge"),
    ],
)
def test_a_third_family_goes_through_the_same_life_cycle(suite_run, role, column):
    """The invented family of tests/third_family.py, described only in its own places."""
    cell = _cell(suite_run, role, column, "demo-dkms")
    assert cell.status == "ok", f"{column}: {cell.detail} (log: {suite_run.log_path})"
