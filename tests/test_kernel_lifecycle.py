"""The test command's slice of the kernel matrix: one Debian suite end to end on its real
arm64 kernels. Install with apt (DKMS builds; dkms status, modinfo version and vermagic are
checked), kernel upgrade to the 16k-page flavour (the headers' hook rebuilds), a foreign
amd64 kernel and an older suite's arm64 kernel (both skipped, apt succeeds), package
upgrade, purge (nothing left), QEMU boots of both page sizes with the DKMS-built module, a
-Werror kbuild, and UEFI/ACPI boots with complete and incomplete descriptions of the NPU.
The full matrix, every flavour of every suite, is 'make check-kernels'."""

import dataclasses

import pytest

from aipu_build.package import build_packages
from aipu_build.patching import patched_copy
from kernel_lab.matrix import Packages, SuiteRun
from kernel_lab.suites import DEFAULT_SUITE, PLANS

from .conftest import require_chroot_support

pytestmark = [pytest.mark.upstream, pytest.mark.chroot]


@pytest.fixture(scope="module")
def suite_run(config, upstream_tree, built_packages, tmp_path_factory):
    require_chroot_support()
    scratch = tmp_path_factory.mktemp("lifecycle")
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
        patched_tree=patched_copy(upstream_tree, scratch / "src"),
    )
    plan = dataclasses.replace(PLANS[DEFAULT_SUITE], flavours=("arm64", "arm64-16k"))
    run = SuiteRun(plan, packages, scratch / "lab", scratch / "lab.log")
    run.run()
    return run


def _cell(run, role, column):
    row = next(row for row in run.rows if row.role == role)
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


def test_installed_module_carries_the_package_version(suite_run, config):
    detail = _cell(suite_run, "installed", "build").detail
    assert "/updates/dkms/aipu.ko" in detail
    assert detail.endswith(f"version {config.version}")


def test_the_upgrade_is_the_16k_flavour_of_the_same_abi(suite_run):
    kernels = [row.kernel for row in suite_run.rows]
    assert len(kernels) == 2
    assert kernels[0].endswith("-arm64")
    assert kernels[1] == kernels[0] + "-16k"


def test_the_old_kernel_is_older_than_the_minimum(suite_run, config):
    detail = _cell(suite_run, "installed", "old-kernel-skip").detail
    assert f"older than kernel.min {config.kernel_min}" in detail


def test_each_boot_refuses_the_other_kernels_module(suite_run):
    kernels = [row.kernel for row in suite_run.rows]
    for row, other in zip(suite_run.rows, reversed(kernels), strict=True):
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
