"""npuctl doctor scenario tests, through the CLI: a board image (files and stand-in
commands) and the libnoe test double; each scenario breaks one thing."""

import json
import os
import shutil
import tarfile
from pathlib import Path

import pytest

from npuctl.models.manifest import load_manifest
from npuctl.models.store import Lock, sha256_of

from .board_image import RELEASE, USER, VERSION, BoardImage
from .conftest import shared_library


@pytest.fixture
def image(tmp_path):
    return BoardImage(tmp_path / "root")


@pytest.fixture
def models(board):
    """The three hub models as the double understands them, pinned in the lock file."""
    board.clip_text()
    board.clip_visual()
    board.model("yolov8n.cix", ["U8 1228800 255.0 0"], ["F16 1411200 1.0 0"])
    manifest = load_manifest()
    lock = Lock.load(board.models)
    for model in manifest.models_of("zhouyi"):
        path = board.models / model.file
        lock.record(model, sha256_of(path), path.stat().st_size)
    return board.models


def doctor(board, image, *args, identity=USER, env=None):
    extra = {
        "NPUCTL_ROOT": str(image.root),
        "NPUCTL_IDENTITY": identity,
        "NOE_DOUBLE_DEVICE": str(image.root / "dev/aipu"),
        **(env or {}),
    }
    result = board.npuctl("doctor", "--json", *args, extra_env=extra)
    assert "Traceback" not in result.stderr, result.stderr
    document = json.loads(result.stdout)
    assert document["schema"] == "npuctl-doctor/1"
    assert document["exit_code"] == result.returncode
    return result.returncode, {check["id"]: check for check in document["checks"]}


def failures(checks):
    return {key: check for key, check in checks.items() if check["status"] == "failure"}


def test_healthy_board(board, image, models):
    code, checks = doctor(board, image)
    assert code == 0, [c["summary"] for c in checks.values() if c["status"] != "ok"]
    assert checks["libnoe.context"]["summary"].startswith(
        "libnoe 0.6.0: context open, target X2_1204MP3"
    )
    assert checks["versions"]["summary"] == "Driver 5.11.0, libnoe 0.6.0"
    for name in ("clip-text", "clip-visual", "yolov8n"):
        assert "two inferences ok" in checks[f"models.{name}"]["summary"]
    immich = checks["models.immich.ViT-B-32__openai"]
    assert immich["status"] == "ok" and "clip-text and clip-visual work" in immich["summary"]


def test_immichs_model_needs_both_encoders(board, image, models):
    (models / "clip_visual.cix").unlink()
    _, checks = doctor(board, image)
    immich = checks["models.immich.ViT-B-32__openai"]
    assert immich["status"] == "info" and immich["fix"] == "npuctl models fetch clip-visual"


def test_human_output_has_a_line_per_check_and_a_summary(board, image, models):
    result = board.npuctl(
        "doctor",
        extra_env={
            "NPUCTL_ROOT": str(image.root),
            "NPUCTL_IDENTITY": USER,
            "NOE_DOUBLE_DEVICE": str(image.root / "dev/aipu"),
        },
    )
    assert result.returncode == 0
    lines = result.stdout.splitlines()
    assert lines[0].startswith("[✓] Platform: arm64, Orange Pi 6 Plus")
    assert lines[-1].startswith("Summary: the NPU stack is healthy")


def test_what_frigate_uploaded_to_the_server_is_told(board, image, models):
    """The server's record of Frigate's uploads (npuctl serve --zmq-uploads): each one, who
    sent it, and a warning with the server's reason for one it does not serve."""
    record = [
        {"name": "mine.cix", "bytes": 4500000, "sha256": "ab" * 32, "peer": "192.168.1.20",
         "owner": "192.168.1.20", "at": "2026-11-28T10:00:00Z", "loaded": True},
        {"name": "broken.cix", "bytes": 12, "sha256": "cd" * 32, "peer": "192.168.1.20",
         "at": "2026-11-28T10:01:00Z", "loaded": False, "error": "loading it crashed libnoe"},
    ]  # fmt: skip
    folder = image.root / "run/npuctl"
    folder.mkdir(parents=True)
    (folder / "frigate-uploads.json").write_text(json.dumps(record))
    code, checks = doctor(board, image)
    served, failed = checks["serve.frigate_upload.1"], checks["serve.frigate_upload.2"]
    assert served["status"] == "info" and "mine.cix" in served["summary"]
    assert "from 192.168.1.20" in served["summary"]
    assert served["summary"].endswith("served to 192.168.1.20")
    assert failed["status"] == "warning" and "crashed libnoe" in failed["detail"]
    assert failed["fix"]
    assert code == 10  # usable, with warnings


def test_no_headers(board, image):
    image.remove(f"lib/modules/{RELEASE}/build")
    code, checks = doctor(board, image)
    assert code == 11
    assert checks["kernel.headers"]["fix"] == f"sudo apt install linux-headers-{RELEASE}"
    assert checks["dkms.installed"]["status"] == "skipped"
    assert "no headers" in checks["dkms.installed"]["summary"]


def test_dkms_build_failed_shows_the_first_error(board, image):
    image.dkms_status(f"aipu/{VERSION}: added")
    image.write(
        f"var/lib/dkms/aipu/{VERSION}/build/make.log",
        "make -C ...\nsky1.c:81:16: error: implicit declaration of function "
        "'scmi_device_get_freq'\nmake: *** Error 2",
    )
    code, checks = doctor(board, image)
    assert code == 11
    finding = checks["dkms.installed"]
    assert "is absent for the running kernel" in finding["summary"]
    assert "scmi_device_get_freq" in finding["detail"]
    assert finding["fix"] == f"sudo dkms install aipu/{VERSION} -k {RELEASE}"


def test_module_built_but_not_loaded(board, image):
    image.remove("sys/module/aipu")
    code, checks = doctor(board, image)
    assert code == 11
    assert checks["module.loaded"]["fix"] == "sudo modprobe aipu"
    assert checks["device.node"]["status"] == "skipped"


def test_a_blacklist_keeps_the_module_out_and_provision_lifts_it(board, image, models):
    """Armbian's CIX images blacklist aipu: the doctor names the file and line, provision
    lifts it (and --undo puts it back byte for byte)."""
    original = "# Armbian\nblacklist aipu\n"
    image.write("etc/modprobe.d/blacklist-aipu.conf", original)
    image.remove("sys/module/aipu")
    code, checks = doctor(board, image)
    assert code == 11
    finding = checks["module.blacklist"]
    assert finding["status"] == "failure"
    assert finding["summary"] == (
        "Module: aipu is blacklisted in /etc/modprobe.d/blacklist-aipu.conf:2 (blacklist aipu)"
    )
    assert finding["fix"] == "sudo npuctl provision --only lift-blacklist"
    assert "module.loaded" not in checks and checks["device.node"]["status"] == "skipped"
    lifted = board.npuctl(
        "provision", "--only", "lift-blacklist", extra_env={"NPUCTL_ROOT": str(image.root)}
    )
    assert lifted.returncode == 0, lifted.stderr
    assert "[done] lift-blacklist" in lifted.stdout
    (image.root / "sys/module/aipu").mkdir()  # modprobe aipu, now that it may
    code, checks = doctor(board, image)
    assert code == 0 and "module.blacklist" not in checks, checks.get("module.blacklist")
    again = board.npuctl(
        "provision", "--only", "lift-blacklist", extra_env={"NPUCTL_ROOT": str(image.root)}
    )
    assert "[already] lift-blacklist" in again.stdout
    undone = board.npuctl(
        "provision", "--undo", "--only", "lift-blacklist",
        extra_env={"NPUCTL_ROOT": str(image.root)},
    )  # fmt: skip
    assert undone.returncode == 0 and "[undone] lift-blacklist" in undone.stdout
    assert (image.root / "etc/modprobe.d/blacklist-aipu.conf").read_text() == original
    code, checks = doctor(board, image)  # loaded by hand: a warning for the next boot
    assert code == 10 and checks["module.blacklist"]["status"] == "warning"
    assert "will not load at the next boot" in checks["module.blacklist"]["summary"]


def test_a_packaged_blacklist_is_hidden_not_edited(board, image):
    packaged = "blacklist aipu\n"
    image.write("usr/lib/modprobe.d/cix-npu.conf", packaged)
    env = {"NPUCTL_ROOT": str(image.root)}
    dry = board.npuctl("provision", "--dry-run", "--only", "lift-blacklist", extra_env=env)
    assert "[would do] lift-blacklist" in dry.stdout
    assert (
        "hide /usr/lib/modprobe.d/cix-npu.conf by /etc/modprobe.d/cix-npu.conf without: "
        "blacklist aipu"
    ) in dry.stdout
    assert not (image.root / "etc/modprobe.d/cix-npu.conf").exists()
    result = board.npuctl("provision", "--only", "lift-blacklist", extra_env=env)
    assert result.returncode == 0, result.stderr
    assert (image.root / "usr/lib/modprobe.d/cix-npu.conf").read_text() == packaged
    override = (image.root / "etc/modprobe.d/cix-npu.conf").read_text()
    assert "hides /usr/lib/modprobe.d/cix-npu.conf" in override
    _, checks = doctor(board, image)
    assert "module.blacklist" not in checks
    board.npuctl("provision", "--undo", "--only", "lift-blacklist", extra_env=env)
    assert not (image.root / "etc/modprobe.d/cix-npu.conf").exists()


def test_a_blacklist_on_the_kernel_command_line_names_the_boot_loader(board, image):
    image.write("proc/cmdline", "root=/dev/nvme0n1p2 modprobe.blacklist=aipu quiet")
    image.remove("sys/module/aipu")
    code, checks = doctor(board, image)
    assert code == 11
    finding = checks["module.blacklist"]
    assert "/proc/cmdline (modprobe.blacklist=aipu)" in finding["summary"]
    assert finding["fix"].startswith("remove modprobe.blacklist=aipu from the kernel command line")


def test_a_kernel_with_the_driver_in_tree_uses_its_own_copy(board, image, models):
    """CIX's tree (and the kernels that carry it: Sky1-Linux, deepin) builds the driver as
    armchina_npu under CONFIG_ARMCHINA_NPU; aipu-dkms skips such a kernel and the doctor
    checks the kernel's copy by its own name."""
    image.write(f"boot/config-{RELEASE}", "CONFIG_ARM64=y\nCONFIG_ARMCHINA_NPU=m\n")
    image.dkms_status("")
    image.remove(f"lib/modules/{RELEASE}/updates/dkms/aipu.ko")
    image.remove("sys/module/aipu")
    (image.root / "sys/module/armchina_npu").mkdir(parents=True)
    own = f"/lib/modules/{RELEASE}/kernel/drivers/misc/armchina-npu/armchina_npu.ko.xz"
    image.command(
        "modinfo",
        f'[ "$3" = armchina_npu ] || exit 1\n'
        f'case "$2" in filename) echo {own};; vermagic) echo "{RELEASE} SMP aarch64";; esac',
    )
    code, checks = doctor(board, image)
    assert code == 0, {k: c["summary"] for k, c in checks.items() if c["status"] != "ok"}
    assert checks["dkms.installed"]["summary"] == (
        f"DKMS: not used, kernel {RELEASE} has its own armchina_npu (CONFIG_ARMCHINA_NPU=m); "
        "aipu-dkms skips it"
    )
    assert checks["module.file"]["summary"] == f"Module: {own}"


def test_stale_module_from_another_kernel(board, image):
    image.modinfo(f"/lib/modules/{RELEASE}/extra/aipu.ko", "6.6.89-cix")
    code, checks = doctor(board, image)
    assert code == 11
    assert "built for 6.6.89-cix" in checks["module.file"]["summary"]
    assert checks["module.file"]["fix"].startswith("sudo rm /lib/modules/")


def test_device_root_only(board, image):
    image.device(0o600, gid=0)
    code, checks = doctor(board, image)
    assert code == 11
    assert "cannot open it" in checks["device.access"]["summary"]
    assert checks["device.access"]["fix"] == "sudo usermod -aG root opi"


def test_user_not_in_the_group(board, image):
    code, checks = doctor(board, image, identity="1000:1000:opi")
    assert code == 11
    assert checks["device.access"]["fix"] == "sudo usermod -aG render opi"


def test_world_writable_device(board, image):
    image.device(0o666)
    code, checks = doctor(board, image)
    assert code == 11
    assert "world-writable" in checks["device.node"]["summary"]


def test_libnoe_missing(board, image, tmp_path):
    result = board.npuctl(
        "--library",
        str(tmp_path / "nowhere/libnoe.so"),
        "doctor",
        "--json",
        extra_env={"NPUCTL_ROOT": str(image.root), "NPUCTL_IDENTITY": USER},
    )
    assert result.returncode == 11
    checks = {c["id"]: c for c in json.loads(result.stdout)["checks"]}
    assert "--umd-deb" in checks["libnoe.found"]["fix"]


def test_context_cannot_open_the_device(board, image):
    code, checks = doctor(board, image, env={"NOE_DOUBLE_FAIL": "init=3"})
    assert code == 11
    context = checks["libnoe.context"]
    assert "OPEN_DEV_FAIL" in context["summary"]
    # Module and device passed: the fix names the other causes, not the checks above.
    assert checks["device.node"]["status"] == "ok"
    assert "another process may hold the NPU" in context["detail"]
    assert context["fix"].startswith("sudo fuser -v /dev/aipu")
    assert "findings above" not in context["fix"]


def test_model_is_an_lfs_pointer(board, image, models):
    (models / "clip_txt.cix").write_text(
        "version https://git-lfs.github.com/spec/v1\noid sha256:0\nsize 74000000\n"
    )
    code, checks = doctor(board, image)
    assert code == 11
    assert "Git LFS pointer" in checks["models.clip-text"]["summary"]


def test_model_load_crashes(board, image, models):
    (models / "yolov8n.cix").write_bytes(b"\x7fELF but not a graph")
    Lock.load(models).record(load_manifest().get("yolov8n"), sha256_of(models / "yolov8n.cix"), 20)
    code, checks = doctor(board, image)
    assert code == 11
    assert "crashed (SIGSEGV)" in checks["models.yolov8n"]["summary"]
    assert checks["models.clip-text"]["status"] == "ok"  # one bad model spoils no other


def test_second_inference_times_out(board, image, models):
    code, checks = doctor(board, image, "--quick", env={})
    assert checks["models"]["status"] == "skipped"
    code, checks = doctor(board, image, env={"NOE_DOUBLE_FAIL": "infer@2=0x23"})
    assert code == 11
    finding = checks["models.clip-text"]
    assert "inference 2 failed" in finding["summary"] and "TIMEOUT" in finding["summary"]
    assert "second-inference hang" in finding["detail"]


def test_hung_inference_is_reported_and_doctor_finishes(board, image, models):
    code, checks = doctor(
        board, image, env={"NOE_DOUBLE_FAIL": "infer@2=hang", "NPUCTL_DOCTOR_CHILD_TIMEOUT": "5"}
    )
    assert code == 11
    assert "hung" in checks["models.clip-text"]["summary"]


def test_secure_boot_without_enrolled_key(board, image):
    image.secure_boot(enabled=True, enrolled=False)
    code, checks = doctor(board, image)
    assert code == 11
    assert checks["secureboot"]["fix"] == "sudo mokutil --import /var/lib/dkms/mok.pub"


def test_firmware_description_incomplete(board, image):
    image.remove("sys/bus/platform/drivers/armchina/CIXH4000:00")
    image.dmesg(
        "[    3.3] armchina CIXH4000:00: firmware description incomplete: 0 of 3 NPU "
        "core power domains (CRE* devices); check the BIOS version"
    )
    code, checks = doctor(board, image)
    assert code == 11
    finding = checks["module.bound"]
    assert "0 of 3 NPU core power domains" in finding["detail"]
    assert "BIOS" in finding["detail"] and "bios_version" in finding["fix"]


def test_missing_commands_are_findings_not_crashes(board, image):
    for command in ("dkms", "mokutil", "dmesg"):
        image.remove(f"usr/bin/{command}")
    code, checks = doctor(board, image)
    assert code == 11
    assert checks["dkms.registered"]["summary"] == "DKMS is not installed"
    assert checks["secureboot"]["status"] == "skipped"


def test_unreadable_proc_entry(board, image):
    image.remove("proc/sys/kernel/osrelease")
    code, checks = doctor(board, image)
    assert code == 11
    assert "cannot read its release" in checks["kernel.headers"]["summary"]
    assert checks["dkms.installed"]["status"] == "skipped"


def test_runtime_pm_auto_is_a_warning(board, image, models):
    control = "/sys/bus/platform/devices/CIXH4000:00/power/control"
    image.write(control.lstrip("/"), "auto")
    code, checks = doctor(board, image)
    assert code == 10
    assert checks["module.runtime-pm"]["fix"] == f"echo on | sudo tee {control}"
    assert "61-aipu-dkms-runtime-pm.rules keeps it 'on'" in checks["module.runtime-pm"]["detail"]


def test_runtime_pm_without_the_packages_rule_says_reinstall(board, image, models):
    image.write("sys/bus/platform/devices/CIXH4000:00/power/control", "auto")
    image.remove("usr/lib/udev/rules.d/61-aipu-dkms-runtime-pm.rules")
    code, checks = doctor(board, image)
    assert code == 10
    assert checks["module.runtime-pm"]["fix"] == "sudo apt install --reinstall aipu-dkms"


def test_bundle_holds_the_report_and_nothing_private(board, image, tmp_path):
    image.dkms_status(f"aipu/{VERSION}: added")
    image.write(f"var/lib/dkms/aipu/{VERSION}/build/make.log", "error: opi broke it")
    bundle = tmp_path / "out" / "support.tar.gz"
    doctor(board, image, "--bundle", str(bundle))
    with tarfile.open(bundle) as archive:
        names = archive.getnames()
        texts = {name: archive.extractfile(name).read().decode() for name in names}
    assert {
        "npuctl-doctor/doctor.json",
        "npuctl-doctor/dkms-status.txt",
        "npuctl-doctor/kernel-log.txt",
        "npuctl-doctor/versions.txt",
    } <= set(names)
    assert any("make.log" in name for name in names)
    assert not any("opi" in text for text in texts.values())
    assert list(bundle.parent.iterdir()) == [bundle]


def test_this_machine_is_not_a_board(board):
    result = board.npuctl("doctor")
    assert result.returncode == 11
    assert "not arm64" in result.stdout or "no CIXH4000" in result.stdout
    assert result.stderr == ""
    document = json.loads(board.npuctl("doctor", "--json").stdout)
    (platform,) = [c for c in document["checks"] if c["area"] == "platform"]
    assert platform["fix"] == "nothing to fix here: this machine has no supported NPU"


def test_a_model_whose_output_ignores_its_input(board, image, models, tmp_path):
    canned = tmp_path / "canned.bin"
    canned.write_bytes(bytes(1411200))
    board.model("yolov8n.cix", ["U8 1228800 255.0 0"], [f"F16 1411200 1.0 0 {canned}"])
    manifest = load_manifest()
    Lock.load(models).record(manifest.get("yolov8n"), sha256_of(models / "yolov8n.cix"), 1)
    code, checks = doctor(board, image)
    assert code == 11
    assert "output ignores the input" in checks["models.yolov8n"]["summary"]


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"NOE_DOUBLE_KMD": ""}, "reports none"),
        ({"NOE_DOUBLE_UMD": "0.5.0"}, "job descriptors do not match"),
    ],
)
def test_known_incompatible_driver_and_library(board, image, env, expected):
    code, checks = doctor(board, image, "--quick", env=env)
    assert code == 11
    assert expected in checks["versions"]["summary"]


AIPU_SHIM = Path(__file__).resolve().parent / "aipu_shim" / "aipu_shim.c"


@pytest.fixture(scope="session")
def aipu_shim(tmp_path_factory):
    return shared_library(AIPU_SHIM, tmp_path_factory.mktemp("aipu-shim") / "aipu_shim.so")


def library_named(board, tmp_path, version):
    """The double as a board has the library: libnoe.so pointing at libnoe.so.<version>."""
    directory = tmp_path / "lib"
    directory.mkdir()
    shutil.copyfile(board.library, directory / f"libnoe.so.{version}")
    (directory / "libnoe.so").symlink_to(f"libnoe.so.{version}")
    return directory / "libnoe.so"


def doctor_with_driver(board, image, aipu_shim, tmp_path, kmd, umd, library=None, quick=True):
    """The doctor's findings with a driver of version ``kmd`` and libnoe ``umd`` (or
    ``library``, another user-mode driver)."""
    env = {
        "LD_PRELOAD": str(aipu_shim),
        "NPUCTL_LIBNOE": str(library or library_named(board, tmp_path, umd)),
        **({} if kmd is None else {"AIPU_SHIM_KMD": kmd}),
    }
    extra = {
        "NPUCTL_ROOT": str(image.root),
        "NPUCTL_IDENTITY": USER,
        "NOE_DOUBLE_DEVICE": str(image.root / "dev/aipu"),
        **env,
    }
    result = board.npuctl("doctor", "--json", *(["--quick"] if quick else []), extra_env=extra)
    assert "Traceback" not in result.stderr, result.stderr
    document = json.loads(result.stdout)
    return result.returncode, {c["id"]: c for c in document["checks"]}, document["facts"]


def test_the_driver_version_is_read_through_its_ioctl(board, image, aipu_shim, tmp_path):
    code, checks, facts = doctor_with_driver(board, image, aipu_shim, tmp_path, "5.11.0", "0.6.0")
    assert code == 0, [c["summary"] for c in checks.values() if c["status"] != "ok"]
    assert facts["kmd"] == {"version": "5.11.0", "read_from": "its ioctl"}
    assert checks["versions"]["status"] == "ok"
    assert checks["versions"]["summary"] == "Driver 5.11.0, libnoe 0.6.0"


@pytest.mark.parametrize(
    ("kmd", "umd", "summary", "fix"),
    [
        (
            "6.0.1",
            "0.6.0",
            "Driver 6.0.1 with libnoe 0.6.0: the ioctl ABI changed in KMD 6.0",
            "sudo apt install aipu-dkms && sudo modprobe -r aipu && sudo modprobe aipu",
        ),
        (
            "6.1.0",  # aipu-compass-dkms: Arm China's line, for libaipudrv and its graphs
            "0.6.0",
            "Driver 6.1.0 with libnoe 0.6.0: Arm China's 6.x line numbers its ioctls",
            "sudo apt install aipu-dkms && sudo modprobe -r aipu && sudo modprobe aipu",
        ),
        (
            "5.11.0",
            "0.5.0",
            "Driver 5.11.0 with libnoe 0.5.0: job descriptors do not match",
            "sudo npuctl provision --umd-deb cix-noe-umd_2.0.2_arm64.deb",
        ),
    ],
)
def test_a_driver_and_library_that_talk_past_each_other_fail_before_any_job(
    board, image, aipu_shim, tmp_path, kmd, umd, summary, fix
):
    code, checks, facts = doctor_with_driver(board, image, aipu_shim, tmp_path, kmd, umd)
    assert code == 11
    assert checks["versions"]["status"] == "failure"
    assert checks["versions"]["summary"].startswith(summary)
    assert checks["versions"]["fix"].startswith(fix)
    assert facts["kmd"]["version"] == kmd
    if kmd.startswith("6.1"):  # what runs on that line instead, and which graphs it loads
        assert "libaipudrv6" in checks["versions"]["detail"]
        assert "not CIX's .cix files" in checks["versions"]["detail"]
    # libnoe never opened the NPU, so no job was ever submitted.
    assert checks["libnoe.context"]["status"] == "skipped"
    assert "do not work together" in checks["libnoe.context"]["summary"]
    assert not [call for call in board.calls() if call.startswith("noe_")]


def test_a_node_that_answers_no_version_ioctl_falls_back_to_the_module(
    board, image, aipu_shim, tmp_path
):
    image.write("sys/module/aipu/version", "5.11.0+git20251022.66bfa0e-1")
    code, checks, facts = doctor_with_driver(board, image, aipu_shim, tmp_path, None, "0.6.0")
    assert code == 0
    assert facts["kmd"] == {"version": "5.11.0", "read_from": "/sys/module/aipu/version"}
    assert checks["versions"]["summary"] == "Driver 5.11.0, libnoe 0.6.0"


def test_the_doctor_names_libaipudrv_and_judges_it_with_arm_chinas_line(
    board, image, aipu_shim, tmp_path, libaipudrv_double
):
    code, checks, facts = doctor_with_driver(
        board, image, aipu_shim, tmp_path, "6.1.0", "6.1.0", library=libaipudrv_double
    )
    assert facts["umd"]["library"] == "libaipudrv" and facts["umd"]["version"] == "6.1.0"
    assert checks["versions"]["status"] == "ok"
    assert checks["versions"]["summary"] == "Driver 6.1.0, libaipudrv 6.1.0"
    assert code == 0, [c["summary"] for c in checks.values() if c["status"] != "ok"]


def _ioctls(board) -> list[int]:
    return [int(call.split(":")[1]) for call in board.calls() if call.startswith("ioctl:")]


@pytest.mark.parametrize(
    ("version", "get_version", "other"), [("6.0.0", 272, 273), ("6.1.0", 273, 272)]
)
def test_the_version_command_is_the_one_of_the_librarys_own_version(
    board, image, aipu_shim, tmp_path, request, version, get_version, other
):
    """libaipudrv 6.1.0 inserted a command before GET_VERSION: 273 is GET_VERSION in 6.1.0 and
    ABORT_CMDPOOL in 6.0.0. npuctl learns the version first, and sends each its own."""
    fixture = "libaipudrv_6_0_double" if version == "6.0.0" else "libaipudrv_double"
    library = request.getfixturevalue(fixture)
    code, checks, facts = doctor_with_driver(
        board, image, aipu_shim, tmp_path, version, version, library=library
    )
    assert facts["umd"]["version"] == version
    assert checks["versions"]["summary"] == f"Driver {version}, libaipudrv {version}"
    assert facts["versions"]["umd"] == version  # the library's own answer to GET_VERSION
    assert code == 0, [c["summary"] for c in checks.values() if c["status"] != "ok"]
    assert _ioctls(board) == [get_version]
    assert other not in _ioctls(board) and "abort_cmdpool" not in board.calls()


@pytest.mark.parametrize(("kmd", "umd"), [("6.1.0", "6.0.0"), ("6.0.0", "6.1.0")])
def test_libaipudrv_6_0_and_kmd_6_1_fail_as_a_pair_though_they_share_every_number(
    board, image, aipu_shim, tmp_path, request, kmd, umd
):
    fixture = "libaipudrv_6_0_double" if umd == "6.0.0" else "libaipudrv_double"
    library = request.getfixturevalue(fixture)
    code, checks, _ = doctor_with_driver(
        board, image, aipu_shim, tmp_path, kmd, umd, library=library
    )
    assert code == 11
    assert checks["versions"]["status"] == "failure"
    assert "struct aipu_job_desc is reordered at the same 144 bytes" in " ".join(
        checks["versions"]["summary"].split()
    )
    assert checks["versions"]["fix"].startswith("sudo apt install aipu-compass-dkms libaipudrv6")
    assert not _ioctls(board) and "create_job" not in board.calls()


def test_a_libaipudrv_of_unknown_version_gets_no_command(
    board, image, aipu_shim, tmp_path, libaipudrv_double
):
    """Built by upstream's own Makefile, the library is libaipudrv.so, with no version."""
    unnamed = tmp_path / "upstream-build" / "libaipudrv.so"
    unnamed.parent.mkdir()
    shutil.copyfile(os.path.realpath(libaipudrv_double), unnamed)
    code, checks, facts = doctor_with_driver(
        board, image, aipu_shim, tmp_path, "6.1.0", "", library=unnamed
    )
    assert facts["umd"] == {"library": "libaipudrv", "path": str(unnamed), "version": ""}
    versions = checks["versions"]
    assert versions["status"] == "warning"
    assert "libaipudrv of unknown version" in versions["summary"]
    assert "libaipudrv 6.0, 6.1 only" in versions["detail"]
    assert versions["fix"].startswith("sudo apt install libaipudrv6")
    assert not _ioctls(board)  # opened, asked its topology, never sent a command number
    assert "init" in board.calls()
    assert code == 10, [c["summary"] for c in checks.values() if c["status"] == "failure"]


def test_libaipudrv_on_cixs_line_fails_before_any_job_with_the_other_package_as_fix(
    board, image, aipu_shim, tmp_path, libaipudrv_double
):
    code, checks, _ = doctor_with_driver(
        board, image, aipu_shim, tmp_path, "5.11.0", "6.1.0", library=libaipudrv_double
    )
    assert code == 11
    assert checks["versions"]["status"] == "failure"
    assert "gets ENOTTY" in checks["versions"]["summary"]
    assert checks["versions"]["fix"].startswith("sudo apt install aipu-compass-dkms")
    assert "create_job" not in board.calls()  # no job was ever submitted


def test_with_libaipudrv_the_doctor_says_the_cix_models_need_libnoe(
    board, image, aipu_shim, tmp_path, libaipudrv_double
):
    board.clip_text()
    _, checks, _ = doctor_with_driver(
        board, image, aipu_shim, tmp_path, "6.1.0", "6.1.0", library=libaipudrv_double, quick=False
    )
    models = checks["models"]
    assert models["status"] == "warning"
    assert "libaipudrv cannot load" in models["summary"]
    assert "Compass NN compiler" in models["detail"] and "X2_1204" in models["detail"]
    assert models["fix"].startswith("sudo apt install aipu-dkms")
    assert "load_graph" not in " ".join(board.calls())  # no .cix was handed to libaipudrv


# -- CIX's own registrations of aipu, and its 26Q2 line ---------------------------------------

FOREIGN_CONF = 'PACKAGE_NAME="aipu"\nPACKAGE_VERSION="{version}"\nAUTOINSTALL="yes"\n'


def dpkg_knows(image, *, owner: str = "", libnoe: str = "") -> None:
    """dpkg-query: the package owning /usr/src/aipu-* (-S), cix-noe-umd's version (-W)."""
    image.data("dpkg-owner", owner)
    image.data("libnoe-package", libnoe)
    image.command(
        "dpkg-query",
        'case "$1" in\n'
        '  -S) [ -s "$NPUCTL_ROOT/fixture/dpkg-owner" ] || exit 1;'
        ' printf "%s: %s\\n" "$(cat "$NPUCTL_ROOT/fixture/dpkg-owner")" "$2";;\n'
        '  -W) case "$*" in *cix-noe-umd*) [ -s "$NPUCTL_ROOT/fixture/libnoe-package" ] || exit 1;'
        ' printf "%s" "$(cat "$NPUCTL_ROOT/fixture/libnoe-package")";; *) exit 1;; esac;;\n'
        "  *) exit 1;;\n"
        "esac",
    )


def test_a_foreign_aipu_that_modprobe_loads_is_named_with_the_commands_that_remove_it(board, image):
    """CIX's own 'dkms add' of its 6.2.0 tree: DKMS installed it for the running kernel, so
    modprobe loads it, not the package's build."""
    image.write("usr/src/aipu-6.2.0/dkms.conf", FOREIGN_CONF.format(version="6.2.0"))
    image.dkms_status(
        f"aipu/6.2.0, {RELEASE}, aarch64: installed\naipu/{VERSION}, {RELEASE}, aarch64: built"
    )
    dpkg_knows(image)
    code, checks = doctor(board, image, "--quick")
    foreign = checks["dkms.foreign"]
    assert code == 11 and foreign["status"] == "failure"
    assert foreign["summary"] == (
        f"DKMS: modprobe loads aipu/6.2.0 on {RELEASE}, a registration none of "
        "aipu-compass-dkms or aipu-dkms made"
    )
    assert "aipu/6.2.0 (added by hand: dkms add)" in foreign["detail"]
    assert foreign["fix"].startswith(
        "sudo dkms remove aipu/6.2.0 --all && sudo rm -rf /usr/src/aipu-6.2.0 && "
        f"sudo dkms install aipu/{VERSION} -k {RELEASE} --force && sudo depmod -a"
    )
    # The package's own registration is the one the DKMS check speaks of.
    assert (
        checks["dkms.installed"]["summary"]
        == f"DKMS: aipu/{VERSION} is built for the running kernel {RELEASE}"
    )


def test_a_foreign_aipu_beside_the_packages_is_a_warning_naming_its_package(board, image):
    image.write("usr/src/aipu-6.2.0/dkms.conf", FOREIGN_CONF.format(version="6.2.0"))
    image.dkms_status(
        f"aipu/{VERSION}, {RELEASE}, aarch64: installed\naipu/6.2.0, {RELEASE}, aarch64: built"
    )
    dpkg_knows(image, owner="cix-npu-driver-dkms")
    code, checks = doctor(board, image, "--quick")
    foreign = checks["dkms.foreign"]
    assert foreign["status"] == "warning"
    assert foreign["summary"] == (
        f"DKMS: aipu/6.2.0 (package cix-npu-driver-dkms) registered beside aipu-dkms's "
        f"aipu/{VERSION}"
    )
    assert f"modprobe loads aipu/{VERSION} on {RELEASE}" in foreign["detail"]
    assert foreign["fix"].startswith("sudo apt purge cix-npu-driver-dkms && ")
    assert checks["dkms.installed"]["status"] == "ok"
    assert code == 10


def test_libnoe_2_on_cixs_6_2_driver_is_a_version_mismatch_not_a_dead_npu(
    board, image, aipu_shim, tmp_path
):
    code, checks, _ = doctor_with_driver(board, image, aipu_shim, tmp_path, "6.2.0", "0.6.0")
    versions = checks["versions"]
    assert code == 11 and versions["status"] == "failure"
    summary = " ".join(versions["summary"].split())
    assert summary.startswith("Driver 6.2.0 with libnoe 0.6.0: libnoe 2.x (UMD 0.6) cannot query")
    assert "query capability [fail]" in summary and "version mismatch" in summary
    assert "cix-npu-driver-dkms" in versions["detail"]
    assert versions["fix"].startswith("sudo apt install aipu-dkms")
    assert "cix-noe-umd 3.1.3 of CIX's SDK 26Q2" in versions["fix"]
    assert not [call for call in board.calls() if call.startswith("noe_")]


@pytest.mark.parametrize(
    ("kmd", "status", "summary"),
    [
        (
            "5.11.0",
            "failure",
            "Driver 5.11.0 with libnoe of cix-noe-umd 3.1.3: a libnoe of KMD 6.0 and KMD 6.2 on "
            "KMD 5.11: the driver does not answer its ioctls",
        ),
        ("6.2.0", "ok", "Driver 6.2.0, libnoe of cix-noe-umd 3.1.3"),
        (
            "6.1.0",
            "warning",
            "Driver 6.1.0 with libnoe of cix-noe-umd 3.1.3: a pair npuctl does not know",
        ),
    ],
)
def test_cixs_26q2_libnoe_is_judged_by_its_package(
    board, image, aipu_shim, tmp_path, kmd, status, summary
):
    dpkg_knows(image, libnoe="3.1.3-1")
    _, checks, facts = doctor_with_driver(
        board, image, aipu_shim, tmp_path, kmd, "", library=board.library
    )
    assert facts["umd"]["version"] == "cix-noe-umd 3.1.3"
    versions = checks["versions"]
    assert versions["status"] == status
    assert " ".join(versions["summary"].split()).startswith(summary)
    if status == "failure":
        assert "version mismatch" in versions["summary"]
        assert versions["fix"].startswith(
            "sudo npuctl provision --umd-deb cix-noe-umd_2.0.2_arm64.deb"
        )
        assert "cix-npu-driver-dkms" in versions["fix"]
    if status == "warning":
        assert "no libnoe is known to speak KMD 6.1" in versions["detail"]
