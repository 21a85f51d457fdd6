"""The test command's slice of the kernel matrix: one Debian suite end to end on its real
arm64 kernels. Install with apt (DKMS builds; dkms status, modinfo version and vermagic are
checked), kernel upgrade (the headers' hook rebuilds), a foreign amd64 kernel (skipped, apt
succeeds), package upgrade, purge (nothing left), QEMU boot with the DKMS-built module, and
a -Werror kbuild, and UEFI/ACPI boots with complete and incomplete descriptions of the NPU.
The full matrix is 'make check-kernels'."""

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
    run = SuiteRun(PLANS[DEFAULT_SUITE], packages, scratch / "lab", scratch / "lab.log")
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
        ("installed", "qemu"),
        ("installed", "acpi"),
        ("installed", "foreign-skip"),
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


def test_the_upgrade_is_another_kernel(suite_run):
    kernels = [row.kernel for row in suite_run.rows]
    assert len(set(kernels)) == 2
    assert all(kernel.endswith("arm64") for kernel in kernels)


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
