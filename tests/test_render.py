"""dkms.conf and the udev rules rendered from each driver package's dkms/<name>.yaml."""

import re
import subprocess
from pathlib import Path

import pytest

from pipeline.config import load_package
from pipeline.render import (
    DKMS_TEMPLATE,
    bundled_copyrights,
    render_file,
    template_context,
    upstream_copyrights,
    write_dkms_conf,
)

DEPRECATED = ("CLEAN", "REMAKE_INITRD", "MODULES_CONF", "OBSOLETE_BY", "BUILD_EXCLUSIVE_ARCH")


@pytest.fixture
def dkms_conf(config, tmp_path: Path) -> Path:
    path = tmp_path / "dkms.conf"
    write_dkms_conf(config, path)
    return path


def _source(dkms_conf: Path, machine: str, variable: str) -> str:
    """Source dkms.conf with bash as dkms does, with uname -m answering ``machine``."""
    script = (
        f"uname() {{ echo {machine}; }}; kernel_source_dir=/k; dkms_tree=/var/lib/dkms; "
        f'. "{dkms_conf}"; printf "%s" "${{{variable}}}"'
    )
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True).stdout


def test_dkms_conf_is_valid_bash(dkms_conf):
    assert subprocess.run(["bash", "-n", str(dkms_conf)], check=False).returncode == 0


def test_dkms_conf_rebuilds_on_kernel_upgrade(dkms_conf):
    assert _source(dkms_conf, "aarch64", "AUTOINSTALL") == "yes"


def test_dkms_conf_has_no_deprecated_directive(dkms_conf):
    assignments = re.findall(r"(?m)^\s*([A-Z_]+)(?:\[\d+\])?=", dkms_conf.read_text())
    assert not set(assignments) & set(DEPRECATED)


def test_dkms_conf_gates_on_arm64_kernel_config_and_release(dkms_conf, config):
    assert _source(dkms_conf, "aarch64", "BUILD_EXCLUSIVE_CONFIG") == (
        "CONFIG_ARM64 !CONFIG_ARMCHINA_NPU"
    )
    assert _source(dkms_conf, "aarch64", "BUILD_EXCLUSIVE_KERNEL") == config.kernel_regex


def test_dkms_conf_native_build_has_no_cross_compiler(dkms_conf):
    make = _source(dkms_conf, "aarch64", "MAKE[0]")
    assert "CROSS_COMPILE" not in make
    assert _source(dkms_conf, "aarch64", "STRIP[0]") == ""
    assert make.startswith("make ")  # dkms adds -j and KERNELRELEASE to a leading make
    assert "-C /k M=/var/lib/dkms/aipu/#MODULE_VERSION#/build" in make


def test_dkms_conf_cross_headers_use_cross_compiler_and_no_host_strip(dkms_conf):
    make = _source(dkms_conf, "x86_64", "MAKE[0]")
    assert "ARCH=arm64 CROSS_COMPILE=aarch64-linux-gnu-" in make
    assert _source(dkms_conf, "x86_64", "STRIP[0]") == "no"


def test_dkms_conf_passes_package_version_to_modinfo(dkms_conf):
    assert "AIPU_MODULE_VERSION=#MODULE_VERSION#" in _source(dkms_conf, "aarch64", "MAKE[0]")


def test_udev_rule_is_not_world_writable(config):
    rule = render_file(config.board_files[0].source, template_context(config))
    match = [line for line in rule.splitlines() if line and not line.startswith("#")]
    assert len(match) == 1
    assert 'SUBSYSTEM=="misc", KERNEL=="aipu"' in match[0]
    mode = int(re.search(r'MODE="(\d+)"', match[0])[1], 8)
    assert mode & 0o007 == 0
    assert 'GROUP="render"' in match[0]
    assert 'TAG+="uaccess"' in match[0]


def test_templates_fail_on_unknown_variables(tmp_path, config):
    template = tmp_path / "t.j2"
    template.write_text("{{ no_such_value }}", encoding="utf-8")
    with pytest.raises(Exception, match="no_such_value"):
        render_file(template, template_context(config))


def test_copyright_holders_come_from_upstream_notices(tmp_path):
    (tmp_path / "a.c").write_text("/* Copyright (c) 2023-2024 Example Co. Ltd. */\n")
    (tmp_path / "b.h").write_text("// Copyright 2024 Other Group Co., Ltd. All Rights Reserved.\n")
    (tmp_path / "c.c").write_text("/* Copyright (C) 2025 Example Co. Ltd. */\n")
    (tmp_path / "LICENSE").write_text("Copyright (C) 1989 Ignored Foundation\n")
    assert upstream_copyrights(tmp_path) == [
        "2023-2025 Example Co. Ltd",
        "2024 Other Group Co., Ltd",
    ]


def test_bundled_files_holders_are_read_from_their_own_notices(tmp_path: Path):
    """The notices as others write them; the last stanza that matches a file takes it, and
    a licence's own text names no holder of the code."""
    (tmp_path / "kmd").mkdir()
    (tmp_path / "kmd/checkpatch.pl").write_text(
        "# (c) 2001, Dave Jones. (the file handling bit)\n"
        "# (c) 2007,2008, Andy Whitcroft <apw@uk.ibm.com> (new conditions)\n"
        "# (c) 2008-2010 Andy Whitcroft <apw@canonical.com>\n"
    )
    (tmp_path / "kmd/a.c").write_text("/* Copyright (c) 2023-2025 Example Co. Ltd. */\n")
    (tmp_path / "kmd/LICENSE.TXT").write_text(
        "Copyright (C) 1989, 1991 Free Software Foundation, Inc.,\n"
    )
    (tmp_path / "elfio.hpp").write_text("Copyright (C) 2001-present by Serge Lamikhov-Center\n")
    assert bundled_copyrights(tmp_path, "kmd/*", ["kmd/checkpatch.pl"]) == [
        "2023-2025 Example Co. Ltd"
    ]
    assert bundled_copyrights(tmp_path, "kmd/checkpatch.pl kmd/none", []) == [
        "2007-2010 Andy Whitcroft",
        "2001 Dave Jones",
    ]
    assert bundled_copyrights(tmp_path, "*.hpp", []) == ["2001-present Serge Lamikhov-Center"]


def test_dkms_template_holds_only_what_varies():
    text = DKMS_TEMPLATE.read_text(encoding="utf-8")
    assert "5.11.0" not in text and "CONFIG_ARM64" not in text


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        # dkms 3.0's autoinstall for a kernel the gates exclude: AUTOINSTALL is withdrawn, so
        # the headers' postinst (and apt) does not fail (dkms >= 3.2 skips it by itself).
        (["autoinstall", "--kernelver", "5.10.0-35-arm64"], ""),
        (["autoinstall", "-k", "6.12.99-no-headers-here/aarch64"], ""),
        (["autoinstall", "--kernelver=7.3.0-no-headers-here"], ""),
        # Anything else keeps it: install/build are gated by BUILD_EXCLUSIVE (exit 77).
        (["install", "-k", "5.10.0-35-arm64"], "yes"),
        ([], "yes"),
    ],
)
def test_dkms_3_0_autoinstall_is_withdrawn_for_excluded_kernels(dkms_conf, arguments, expected):
    script = f'. "{dkms_conf}"; printf "%s" "$AUTOINSTALL"'
    result = subprocess.run(
        ["bash", "-c", script, "dkms", *arguments], capture_output=True, text=True, check=True
    )
    assert result.stdout == expected


def test_dkms_3_0_autoinstall_keeps_a_supported_kernel(dkms_conf, tmp_path):
    """The same check against a headers tree that has the gate: AUTOINSTALL stays."""
    release = "6.12.99-test-arm64"
    build = tmp_path / "lib" / "modules" / release / "build"
    build.mkdir(parents=True)
    (build / ".config").write_text("CONFIG_ARM64=y\n")
    text = dkms_conf.read_text().replace("/lib/modules/", f"{tmp_path}/lib/modules/")
    moved = tmp_path / "dkms.conf"
    moved.write_text(text)
    script = f'. "{moved}"; printf "%s" "$AUTOINSTALL"'
    result = subprocess.run(
        ["bash", "-c", script, "dkms", "autoinstall", "-k", release],
        capture_output=True,
        text=True,
        check=True,
    )
    assert result.stdout == "yes"


@pytest.mark.parametrize(
    ("kernel_config", "expected"),
    [
        ("CONFIG_ARM64=y\n", "yes"),  # Debian's arm64 kernels
        ("CONFIG_ARM64=y\nCONFIG_ARMCHINA_NPU=m\n", ""),  # the driver in-tree, as a module
        ("CONFIG_ARM64=y\nCONFIG_ARMCHINA_NPU=y\n", ""),  # built in (CIX's Kconfig: bool)
        ("CONFIG_X86_64=y\n", ""),
    ],
)
def test_aipu_skips_kernels_that_have_the_driver_in_tree(
    dkms_conf, tmp_path, kernel_config, expected
):
    autoinstall, _ = autoinstall_for(dkms_conf, tmp_path, "6.19.3-sky1", kernel_config)
    assert autoinstall == expected


def autoinstall_for(conf: Path, tmp_path: Path, release: str, kernel_config: str):
    """AUTOINSTALL and BUILD_EXCLUSIVE_CONFIG as 'dkms autoinstall -k RELEASE' sees them, for
    a kernel of this configuration (headers under tmp_path)."""
    build = tmp_path / "lib" / "modules" / release / "build"
    build.mkdir(parents=True)
    (build / ".config").write_text(kernel_config)
    moved = tmp_path / "dkms.conf"
    moved.write_text(conf.read_text().replace("/lib/modules/", f"{tmp_path}/lib/modules/"))
    script = f'. "{moved}"; printf "%s|%s" "$AUTOINSTALL" "$BUILD_EXCLUSIVE_CONFIG"'
    result = subprocess.run(
        ["bash", "-c", script, "dkms", "autoinstall", "-k", release],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return tuple(result.stdout.split("|"))


@pytest.fixture
def rocket_conf(tmp_path: Path) -> Path:
    path = tmp_path / "rocket" / "dkms.conf"
    write_dkms_conf(load_package("rocket-dkms"), path)
    return path


@pytest.mark.parametrize(
    ("kernel_config", "expected"),
    [
        # trixie-backports 7.3.4: the accel core, no rocket.
        (
            "CONFIG_ARM64=y\nCONFIG_DRM_ACCEL=y\nCONFIG_DRM_SCHED=m\nCONFIG_DRM_GEM_SHMEM_HELPER=m\n",
            "yes",
        ),
        # sid 7.2: no accel core.
        ("CONFIG_ARM64=y\n# CONFIG_DRM_ACCEL is not set\nCONFIG_DRM_SCHED=m\n", ""),
        # a kernel that builds rocket itself.
        (
            "CONFIG_ARM64=y\nCONFIG_DRM_ACCEL=y\nCONFIG_DRM_SCHED=m\n"
            "CONFIG_DRM_GEM_SHMEM_HELPER=m\nCONFIG_DRM_ACCEL_ROCKET=m\n",
            "",
        ),
    ],
)
def test_rocket_builds_only_where_accel_is_on_and_rocket_is_not(
    rocket_conf, tmp_path, kernel_config, expected
):
    autoinstall, gate = autoinstall_for(rocket_conf, tmp_path, "7.3.4+deb13-arm64", kernel_config)
    assert autoinstall == expected
    assert gate.split() == [
        "CONFIG_ARM64",
        "CONFIG_DRM_ACCEL",
        "CONFIG_DRM_SCHED",
        "CONFIG_DRM_GEM_SHMEM_HELPER",
        "!CONFIG_DRM_ACCEL_ROCKET",
    ]


def test_rocket_passes_its_version_and_gives_accel_to_render(rocket_conf):
    assert "ROCKET_MODULE_VERSION=#MODULE_VERSION#" in _source(rocket_conf, "aarch64", "MAKE[0]")
    config = load_package("rocket-dkms")
    rule = render_file(config.board_files[0].source, template_context(config))
    lines = [line for line in rule.splitlines() if line and not line.startswith("#")]
    assert lines == ['SUBSYSTEM=="accel", KERNEL=="accel[0-9]*", GROUP="render", MODE="0660"']


def test_the_runtime_pm_rule_keeps_the_bound_npu_powered(config):
    rule_file = next(f for f in config.board_files if f.name.endswith("runtime-pm.rules"))
    rule = render_file(rule_file.source, template_context(config))
    lines = [line for line in rule.splitlines() if line and not line.startswith("#")]
    assert lines == [
        'ACTION=="bind", SUBSYSTEM=="platform", DRIVER=="armchina", ATTR{power/control}="on"'
    ]
    assert rule_file.installed_path == "/usr/lib/udev/rules.d/61-aipu-dkms-runtime-pm.rules"


def test_every_package_has_its_own_appstream_id():
    """Two packages of one module (aipu-dkms, aipu-compass-dkms) install their metainfo side
    by side in a repository's catalogue: one id each, as software centres key on it."""
    from pipeline.config import package_names

    ids = {name: load_package(name).appstream_id for name in package_names()}
    assert len(set(ids.values())) == len(ids), ids
    assert ids["aipu-dkms"] == "io.github.aipu_dkms.aipu"  # published: never renamed
    assert ids["aipu-compass-dkms"] == "io.github.aipu_dkms.aipu_compass"
    for value in ids.values():
        assert re.fullmatch(r"[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+", value), value
