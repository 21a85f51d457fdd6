"""Installing the built .deb with apt in a Debian chroot with real arm64 kernel headers:
DKMS builds and installs aipu.ko for that kernel; purge leaves nothing behind."""

from pathlib import Path

import pytest
from kernel_lab import kernels, scenarios
from kernel_lab.chroot import create_chroot
from kernel_lab.suites import DEFAULT_SUITE, SUITES

from .conftest import require_chroot_support

pytestmark = [pytest.mark.upstream, pytest.mark.chroot]


@pytest.fixture(scope="module")
def lab(built_packages, tmp_path_factory):
    require_chroot_support()
    suite = SUITES[DEFAULT_SUITE]
    chroot = create_chroot(suite, tmp_path_factory.mktemp("lab"))
    with chroot.mounted():
        kernel = kernels.resolve(chroot, target_release=suite.target_release)
        kernels.install(chroot, kernel, target_release=suite.target_release)
        installed = scenarios.install_deb(chroot, built_packages["deb"])
        yield chroot, kernel, installed
    chroot.remove()


def test_apt_install_succeeds(lab):
    _, _, installed = lab
    assert installed.ok, installed.output[-2000:]


def test_dkms_reports_installed_for_the_kernel(lab):
    chroot, kernel, _ = lab
    assert scenarios.dkms_status(chroot) == {kernel.release: "installed"}


def test_installed_module_is_this_version_for_this_kernel(lab, config):
    chroot, kernel, _ = lab
    modules = scenarios.installed_modules(chroot, kernel)
    assert len(modules) == 1 and "/updates/dkms/" in modules[0]
    info = scenarios.modinfo(chroot, modules[0])
    assert info["version"] == config.version
    assert info["vermagic"].split()[0] == kernel.release
    assert info["name"] == "aipu"
    assert "acpi*:CIXH4000:*" in chroot.run(["modinfo", "-F", "alias", modules[0]]).stdout


def test_udev_rule_is_installed_where_udev_reads_it(lab):
    chroot, _, _ = lab
    rules = list(Path(chroot.path("/usr/lib/udev/rules.d")).glob("*aipu*.rules"))
    assert len(rules) == 1
    assert 'MODE="0660"' in rules[0].read_text(encoding="utf-8")


def test_purge_leaves_no_module_source_or_dkms_tree(lab):
    chroot, _, _ = lab
    purged = scenarios.purge(chroot, "aipu-dkms")
    assert purged.ok, purged.output[-2000:]
    assert scenarios.leftovers(chroot) == []
    assert scenarios.dkms_status(chroot) == {}
