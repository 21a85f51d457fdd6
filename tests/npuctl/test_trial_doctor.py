"""The doctor on a board whose driver build is held by its guarded first load (the trial
records every driver package's module-trial keeps), held by hand, or released again with
'npuctl driver': through the CLI, on a board image, with the package's real guard rendered
into it for hold and release."""

import json
import tarfile

import pytest

from pipeline.config import load_package
from pipeline.render import render_file, template_context

from .board_image import RELEASE, VERSION, BoardImage
from .test_doctor import doctor

RECORDS = "var/lib/aipu-dkms/trials"
HELD = f"{RECORDS}/{RELEASE}@{VERSION}.held"
TRIAL_BOOT = "0d1f5a3e-6b1c-4f2e-9a7d-3c2b1a0f9e8d"
# 2026-11-27 21:14:05 UTC
STARTED = "1795814045"
OOPS = (
    "Nov 27 21:14:06 opi6 kernel: armchina CIXH4000:00: AIPU KMD (v5.11.0) probe start...\n"
    "Nov 27 21:14:06 opi6 kernel: Unable to handle kernel paging request at virtual address "
    "dead000000000108\n"
    "Nov 27 21:14:06 opi6 kernel: pc : aipu_mm_reserved_iova_for_never_map+0x7c/0x1c0 [aipu]\n"
    "Nov 27 21:14:06 opi6 kernel: Kernel panic - not syncing: Oops: Fatal exception\n"
)


@pytest.fixture
def image(tmp_path):
    return BoardImage(tmp_path / "root")


def _not_loaded(image: BoardImage) -> None:
    image.remove("sys/module/aipu")
    image.remove("sys/bus/platform/drivers/armchina/CIXH4000:00")
    image.remove("dev/aipu")


def _held_by_a_trial(image: BoardImage) -> None:
    image.write(
        HELD,
        f"module=aipu\nkernel={RELEASE}\nversion={VERSION}\nreason=trial\n"
        f"started={STARTED}\nboot={TRIAL_BOOT}\nheld=1795814100\n",
    )
    _not_loaded(image)


def _install_guard(image: BoardImage) -> None:
    config = load_package("aipu-dkms")
    for board_file in config.board_files:
        if board_file.name == "module-trial":
            guard = image.write(
                board_file.installed_path.lstrip("/"),
                render_file(board_file.source, template_context(config)),
            )
            guard.chmod(0o755)


def test_a_build_held_by_its_trial_is_explained_with_the_trial_boots_kernel_log(
    board, image, tmp_path
):
    _held_by_a_trial(image)
    (image.root / "var/log/journal").mkdir(parents=True)
    image.data("journal", OOPS)
    image.command(
        "journalctl",
        f'[ "$3" = "{TRIAL_BOOT}" ] && cat "$NPUCTL_ROOT/fixture/journal" || exit 1',
    )
    nfd = tmp_path / "features"
    bundle = tmp_path / "bundle.tar.gz"
    code, checks = doctor(board, image, "--quick", "--nfd", str(nfd), "--bundle", str(bundle))
    assert code == 11
    held = checks["module.held"]
    assert held["status"] == "failure"
    assert held["summary"] == (
        f"Module: aipu {VERSION} for {RELEASE} is held: its first load, a trial started "
        "2026-11-27 21:14:05 UTC, never finished"
    )
    assert "crashed, hung or was reset" in held["detail"]
    assert "aipu_mm_reserved_iova_for_never_map+0x7c" in held["detail"]
    assert "Kernel panic" in held["detail"]
    assert held["fix"].startswith("sudo npuctl driver release aipu && sudo modprobe aipu")
    # Held, so not loaded: no "not loaded" finding that would send the user to modprobe.
    assert "module.loaded" not in checks
    # --json's facts, the NFD labels and the support bundle carry it.
    result = board.npuctl("doctor", "--json", "--quick", extra_env={"NPUCTL_ROOT": str(image.root)})
    facts = json.loads(result.stdout)["facts"]
    assert facts["driver_held"] is True
    assert facts["held_builds"] == [
        {
            "kernel": RELEASE,
            "version": VERSION,
            "state": "held",
            "module": "aipu",
            "reason": "trial",
            "started": STARTED,
            "boot": TRIAL_BOOT,
            "held": "1795814100",
        }
    ]
    assert "npuctl.io/driver-held=true" in nfd.read_text().splitlines()
    with tarfile.open(bundle) as archive:
        names = archive.getnames()
        assert f"npuctl-doctor/trials/{RELEASE}@{VERSION}.held" in names
        log = archive.extractfile(f"npuctl-doctor/trials/kernel-log-of-boot-{TRIAL_BOOT}.txt")
        assert "aipu_mm_reserved_iova_for_never_map" in log.read().decode()


def test_without_a_persistent_journal_the_doctor_says_the_log_is_gone(board, image):
    _held_by_a_trial(image)
    _, checks = doctor(board, image, "--quick")
    detail = checks["module.held"]["detail"]
    assert "not persistent (no /var/log/journal)" in detail
    assert "sudo mkdir -p /var/log/journal" in detail


def test_hold_by_hand_then_release_clears_the_finding(board, image, tmp_path):
    _install_guard(image)
    env = {"NPUCTL_ROOT": str(image.root)}
    held = board.npuctl("driver", "hold", "aipu", "--reason", "HDMI goes dark", extra_env=env)
    assert held.returncode == 0, held.stderr
    assert f"aipu {VERSION} for {RELEASE} held by hand" in held.stdout
    record = (image.root / HELD).read_text()
    assert "reason=user" in record and "note=HDMI goes dark" in record
    # Loaded now (it was before the hold): a warning, it will not load at the next boot.
    code, checks = doctor(board, image, "--quick")
    assert code == 10, [c["summary"] for c in checks.values() if c["status"] != "ok"]
    finding = checks["module.held"]
    assert finding["status"] == "warning"
    assert "held by hand since" in finding["summary"] and "HDMI goes dark" in finding["summary"]
    assert finding["fix"] == "sudo npuctl driver release aipu"
    listed = board.npuctl("driver", "trials", "aipu", "--json", extra_env=env)
    assert [t["state"] for t in json.loads(listed.stdout)["trials"]] == ["held"]
    released = board.npuctl("driver", "release", "aipu", extra_env=env)
    assert released.returncode == 0, released.stderr
    assert "the next load" in released.stdout and "new trial" in released.stdout
    assert not (image.root / HELD).exists()
    _, checks = doctor(board, image, "--quick")
    assert "module.held" not in checks


def test_a_build_held_on_another_kernel_is_a_warning(board, image):
    image.write(
        f"{RECORDS}/7.2.13+deb14-arm64@{VERSION}.held",
        f"module=aipu\nkernel=7.2.13+deb14-arm64\nversion={VERSION}\nreason=trial\n"
        f"started={STARTED}\nboot={TRIAL_BOOT}\n",
    )
    _, checks = doctor(board, image, "--quick")
    finding = checks["module.held-elsewhere"]
    assert finding["status"] == "warning"
    assert finding["fix"] == "sudo npuctl driver release aipu --kernel 7.2.13+deb14-arm64"
    assert "module.held" not in checks


def test_driver_commands_name_what_is_missing(board, image):
    env = {"NPUCTL_ROOT": str(image.root)}
    unknown = board.npuctl("driver", "hold", "nosuch", extra_env=env)
    assert unknown.returncode == 2 and "no driver package builds a module 'nosuch'" in (
        unknown.stderr
    )
    no_guard = board.npuctl("driver", "release", "aipu", extra_env=env)
    assert no_guard.returncode == 2
    assert "no trial guard is installed" in no_guard.stderr and "Traceback" not in (no_guard.stderr)
