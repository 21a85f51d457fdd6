"""The KMD/UMD pairs table: its verdicts, and that it agrees with the driver package."""

from pathlib import Path

import pytest
import yaml

from npuctl.doctor.findings import Status
from npuctl.platforms.zhouyi import kmd
from npuctl.platforms.zhouyi.driver_pairs import (
    series,
    table,
    umd_from_library_name,
    umd_from_package,
    verdict,
)

ROOT = Path(__file__).resolve().parents[2]


def test_the_shipped_kmd_is_the_one_aipu_dkms_builds():
    description = yaml.safe_load((ROOT / "dkms/aipu-dkms.yaml").read_text(encoding="utf-8"))
    assert table().shipped_kmd == description["package"]["upstream_version"]
    assert table().for_kmd(series(table().shipped_kmd)).umd == "0.6"


def test_the_ioctl_number_is_the_headers():
    # _IOR('A', 18, char *) as armchina_aipu.h defines it, the value libnoe uses on arm64.
    assert kmd.AIPU_IOCTL_GET_DRIVER_VERSION == 0x80084112


@pytest.mark.parametrize(
    ("kmd_version", "umd", "status", "summary_part"),
    [
        ("5.11.0", "0.6.0", Status.OK, "Driver 5.11.0, libnoe 0.6.0"),
        ("5.11.0-012345678", "0.6.0", Status.OK, "Driver 5.11.0-012345678, libnoe 0.6.0"),
        ("5.11.0", "0.5.0", Status.FAIL, "job descriptors do not match"),
        ("5.11.0", "0.7.0", Status.FAIL, "this libnoe is newer than the driver"),
        ("6.0.1", "0.6.0", Status.FAIL, "the ioctl ABI changed in KMD 6.0"),
        ("6.0.3", "0.5.0", Status.FAIL, "the ioctl ABI changed in KMD 6.0"),
        ("6.1.0", "0.6.0", Status.FAIL, "libnoe 0.6 fails at its first call with ENOTTY"),
        ("7.1.0", "0.6.0", Status.WARN, "a pair npuctl does not know"),
    ],
)
def test_verdicts(kmd_version, umd, status, summary_part):
    judged = verdict(kmd_version, umd)
    assert judged.status == status
    assert summary_part in judged.summary
    assert (judged.fix is None) == (status == Status.OK)
    if status == Status.FAIL:
        assert f"Driver {kmd_version} with libnoe {umd}" in judged.summary


def test_the_fix_installs_the_library_for_the_loaded_driver_or_the_driver_for_the_library():
    assert "provision --umd-deb cix-noe-umd_2.0.2_arm64.deb" in verdict("5.11.0", "0.5.0").fix
    assert verdict("6.0.1", "0.6.0").fix.startswith("sudo apt install aipu-dkms")
    assert "libnoe 0.6.0 speaks KMD 5.11." in verdict("6.0.1", "0.6.0").detail


def test_on_arm_chinas_line_the_doctor_names_its_user_space_and_graphs():
    judged = verdict("6.1.0", "0.6.0")
    assert judged.fix.startswith("sudo apt install aipu-dkms")
    for part in ("libaipudrv6", "Compass NN compiler", "X2_1204", ".cix files"):
        assert part in judged.detail


def test_library_versions():
    assert umd_from_library_name("libnoe.so.0.6.0") == "0.6.0"
    assert umd_from_library_name("libnoe.so") == ""
    assert umd_from_package("2.0.2") == "0.6"
    assert umd_from_package("2.0.2-1") == "0.6"
    assert umd_from_package("1.9.0") == ""


def test_reading_a_node_that_is_not_the_driver_is_an_error_not_a_crash(tmp_path, capsys):
    with pytest.raises(OSError):
        kmd.read_kmd_version("/dev/null")
    assert kmd.main([str(tmp_path / "missing")]) == 0
    assert "No such file or directory" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("kmd_version", "umd", "library", "status", "summary_part"),
    [
        # CIX's 26Q2 line: KMD 6.2.0 with libnoe 3.1.3, known by its package only.
        ("6.2.0", "cix-noe-umd 3.1.3", "libnoe", Status.OK, "Driver 6.2.0, libnoe of"),
        ("6.2.0", "0.6.0", "libnoe", Status.FAIL, "query capability [fail]"),
        ("6.2.0", "cix-noe-umd 2.0.0", "libnoe", Status.FAIL, "query capability [fail]"),
        ("5.11.0", "cix-noe-umd 3.1.3", "libnoe", Status.FAIL, "version mismatch"),
        ("6.0.1", "cix-noe-umd 3.1.2", "libnoe", Status.OK, "Driver 6.0.1, libnoe of"),
        # Not shown anywhere: said so, not passed.
        ("6.0.1", "cix-noe-umd 3.1.3", "libnoe", Status.WARN, "a pair npuctl does not know"),
        ("6.1.0", "cix-noe-umd 3.1.3", "libnoe", Status.WARN, "a pair npuctl does not know"),
        ("6.2.0", "6.1.0", "libaipudrv", Status.WARN, "a pair npuctl does not know"),
        # Arm China's 6.0 and 6.1 share every number but not SCHEDULE_JOB's layout.
        ("6.0.0", "6.1.0", "libaipudrv", Status.FAIL, "struct aipu_job_desc is reordered"),
        ("6.1.0", "6.0.0", "libaipudrv", Status.FAIL, "struct aipu_job_desc is reordered"),
        ("6.0.0", "6.0.0", "libaipudrv", Status.OK, "Driver 6.0.0, libaipudrv 6.0.0"),
        ("5.11.0", "6.1.0", "libaipudrv", Status.FAIL, "gets ENOTTY"),
    ],
)
def test_the_6_x_verdicts(kmd_version, umd, library, status, summary_part):
    judged = verdict(kmd_version, umd, library)
    assert judged.status == status, judged
    assert summary_part in " ".join(judged.summary.split())
    assert (judged.fix is None) == (status == Status.OK) or status == Status.WARN


def test_what_is_not_known_is_said():
    assert "6.2.0's source is not reachable" in verdict("6.2.0", "0.6.0").detail
    assert (
        "3.1.2" in verdict("6.2.0", "0.6.0").detail
        or "not known" in verdict("6.2.0", "0.6.0").detail.lower()
    )
    assert "Not known" in verdict("6.1.0", "cix-noe-umd 3.1.3").detail


def test_a_libnoe_package_names_its_series():
    assert umd_from_package("3.1.3-1") == "cix-noe-umd 3.1.3"
    assert umd_from_package("2.0.0") == "cix-noe-umd 2.0.0"
