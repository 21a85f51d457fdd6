"""npuctl doctor on RK3588 board images: a healthy Orange Pi 5 Plus, then one broken thing
per scenario, each with its finding and the fix under it. The delegate probe and the golden
check run for real: the Teflon double in a child, a model built at test time."""

import json
import shutil
import subprocess
import sys
import tarfile

import pytest

from npuctl.files import sha256_of
from npuctl.models.manifest import load_manifest
from npuctl.models.store import Lock
from npuctl.platforms.rocket import DEFAULT_DELEGATE

from .board_image import USER
from .rocket_board import RELEASE, RocketBoard


@pytest.fixture
def image(tmp_path, teflon_double):
    return RocketBoard(tmp_path / "root", teflon_double)


@pytest.fixture
def model(rocket, tflite_classifier):
    entry = load_manifest().get("mobilenet")
    path = rocket.models / entry.file
    shutil.copyfile(tflite_classifier(), path)
    Lock.load(rocket.models).record(entry, sha256_of(path), path.stat().st_size)
    return path


def doctor(rocket, image, *args, identity=USER, env=None):
    result = rocket.npuctl(
        "doctor",
        "--json",
        *args,
        extra_env={
            "NPUCTL_ROOT": str(image.root),
            "NPUCTL_IDENTITY": identity,
            "NPUCTL_TEFLON": DEFAULT_DELEGATE,  # the image's own, under its root
            **(env or {}),
        },
    )
    assert "Traceback" not in result.stderr, result.stderr
    document = json.loads(result.stdout)
    assert document["exit_code"] == result.returncode
    return result.returncode, {check["id"]: check for check in document["checks"]}


def not_ok(checks):
    return {k: c["summary"] for k, c in checks.items() if c["status"] not in ("ok", "info")}


def test_a_blacklisted_rocket_is_named_with_its_file(rocket, image, model):
    image.write("usr/lib/modprobe.d/npu.conf", "install rocket /bin/true\n")
    image.remove("sys/module/rocket")
    code, checks = doctor(rocket, image)
    assert code == 11
    finding = checks["module.blacklist"]
    assert finding["summary"] == (
        "Module: rocket is blacklisted in /usr/lib/modprobe.d/npu.conf:1 (install rocket /bin/true)"
    )
    assert finding["fix"] == "sudo npuctl provision --only lift-blacklist"


def test_healthy_board(rocket, image, model):
    code, checks = doctor(rocket, image)
    assert code == 0, not_ok(checks)
    assert "3 NPU core nodes enabled" in checks["platform.npu"]["summary"]
    assert checks["delegate.probe"]["summary"].endswith("loaded rocket driver")
    assert "NPU and CPU agree" in checks["golden"]["summary"]
    assert "largest element difference 0" in checks["golden"]["summary"]


def test_a_board_with_one_core_enabled_is_told_so_and_checked_on_that_core(rocket, image, model):
    """Like the emulated Orange Pi 5 Plus: two of the three cores disabled in the device tree."""
    base = "sys/firmware/devicetree/base"
    for address in ("fdab0000", "fdac0000"):
        image.write(f"{base}/npu@{address}/status", "disabled\0")
    image.dmesg("[    4.0] rocket fdad0000.npu: Rockchip NPU core 0 version: 65538\n")
    code, checks = doctor(rocket, image)
    assert code == 11
    platform = checks["platform.npu"]
    assert platform["status"] == "failure"
    assert "npu@fdab0000, npu@fdac0000 are disabled" in platform["summary"]
    assert "device-tree overlay" in platform["fix"]
    assert checks["cores.probed"]["status"] == "ok"
    assert checks["cores.probed"]["summary"] == "1 NPU core probed"
    assert checks["golden"]["status"] == "ok", not_ok(checks)


def downloaded(rocket, name, built):
    """A model of rocket's manifest as 'npuctl models fetch' leaves it: its file and its lock."""
    entry = load_manifest().get(name)
    path = rocket.models / entry.file
    shutil.copyfile(built, path)
    Lock.load(rocket.models).record(entry, sha256_of(path), path.stat().st_size)
    return path


@pytest.fixture
def detector(tmp_path):
    pytest.importorskip("tflite", reason="PyPI's tflite builds the test models: run 'make deps'")
    from testkit.tflite_models import ssd_detector

    return ssd_detector(tmp_path / "ssd.tflite", size=320)


def test_golden_checks_every_downloaded_model(rocket, image, model, detector, tflite_classifier):
    code, checks = doctor(rocket, image)
    assert code == 0, not_ok(checks)
    for name in ("ssdlite", "mobilenet-v2"):
        assert checks[f"golden.{name}"]["status"] == "info"
        assert f"npuctl models fetch {name}" in checks[f"golden.{name}"]["summary"]
    downloaded(rocket, "ssdlite", detector)
    downloaded(rocket, "mobilenet-v2", tflite_classifier("v2.tflite", classes=1001, seed=8))
    code, checks = doctor(rocket, image)
    assert code == 0, not_ok(checks)
    ssdlite = checks["golden.ssdlite"]["summary"]
    assert ssdlite.startswith("Golden check, ssdlite: NPU and CPU agree:")
    assert "detections on both" in ssdlite and "largest score difference 0.000" in ssdlite
    assert ssdlite.endswith("(on a fixed pattern)")  # the photograph is not downloaded
    assert "largest element difference 0" in checks["golden.mobilenet-v2"]["summary"]


def test_the_golden_checks_run_on_the_photograph_once_downloaded(rocket, image, model, detector):
    """The served detector needs the photograph (models.yaml: golden-photo, pinned by its
    sha256): once it is in the models' folder the golden checks run on it; a file of that
    name that is not the photograph is not used."""
    from rocket_emu import pins, sources

    published = sources.published_cache(pins.load())
    if not published.is_dir():
        pytest.skip(
            "the published photograph is not cached: make check-rocket-emu CORAL_GIT=<a clone "
            "of google-coral/test_data>"
        )
    assert "golden-photo" in load_manifest().get("ssdlite").needs
    downloaded(rocket, "ssdlite", detector)
    photo = rocket.models / load_manifest().get("golden-photo").file
    photo.write_bytes(b"BM not the photograph")
    code, checks = doctor(rocket, image)
    assert checks["golden.ssdlite"]["summary"].endswith("(on a fixed pattern)")
    shutil.copyfile(published / photo.name, photo)
    code, checks = doctor(rocket, image)
    assert code == 0, not_ok(checks)
    for finding in ("golden", "golden.ssdlite"):
        assert checks[finding]["summary"].endswith(f"(on the photograph {photo.name})"), checks


def test_a_detector_the_npu_answers_wrongly_fails_its_golden_check(rocket, image, model, detector):
    downloaded(rocket, "ssdlite", detector)
    # The double now claims the model's ops and answers zeros: what a broken NPU does.
    code, checks = doctor(rocket, image, env={"TEFLON_DOUBLE_INFER_MS": "1"})
    assert code == 11
    finding = checks["golden.ssdlite"]
    assert finding["status"] == "failure"
    assert "the NPU and the CPU disagree" in finding["summary"]
    # Under the wanted Teflon (26.2) real boards compute SSDLite MobileDet wrongly too: the
    # finding says so and offers the other models, not an upgrade.
    assert MOBILEDET in finding["detail"]
    assert NO_RELEASE in finding["detail"]
    assert finding["fix"] == "npuctl serve --models mobilenet,mobilenet-v2"


@pytest.mark.parametrize(
    ("installed", "candidate", "fix"),
    [
        # The board's sources have the wanted build (the project's trixie-teflon suite).
        ("26.1.6-1~bpo13+1", "26.2.6-1", "sudo npuctl provision --only teflon-pin --only teflon"),
        # They do not: the project's repository first.
        ("26.1.6-1~bpo13+1", "26.1.6-1~bpo13+1", "add trixie-teflon to the project's apt"),
    ],
)
def test_a_classifier_with_additions_the_npu_answers_wrongly_names_the_teflon(
    rocket, image, model, tmp_path, installed, candidate, fix
):
    """A classifier with residual additions (MobileNet V2's shape) that the NPU answers
    wrongly under Mesa 26.1: the finding names the installed Teflon and what its release adds
    wrongly, and the fix brings the release that adds right."""
    pytest.importorskip("tflite", reason="PyPI's tflite builds the test models: run 'make deps'")
    from testkit.tflite_models import ConvLayer, conv_stack

    image.teflon_version(installed)
    image.teflon_candidate(candidate)
    block = [
        ConvLayer(8, linear=True),
        ConvLayer(48),
        ConvLayer(0, depthwise=True),
        ConvLayer(8, linear=True, residual=True),
    ]
    downloaded(
        rocket,
        "mobilenet-v2",
        conv_stack(tmp_path / "v2.tflite", block, size=16, classes=1001),
    )
    code, checks = doctor(rocket, image, env={"TEFLON_DOUBLE_INFER_MS": "1"})
    assert code == 11
    finding = checks["golden.mobilenet-v2"]
    assert finding["status"] == "failure"
    assert "the NPU and the CPU disagree" in finding["summary"]
    assert f"Mesa Teflon {installed} adds (residual additions, ADD) wrongly" in finding["detail"]
    assert "The model has 1 additions (ADD)" in finding["detail"]
    assert "serve the others: npuctl serve --models mobilenet,ssdlite" in finding["detail"]
    assert fix in finding["fix"]
    # The same failure of a model the release is not known to break keeps the memory advice.
    assert "additions" not in checks["golden"]["detail"]
    assert "mem=3838M" in checks["golden"]["fix"]


MOBILEDET = "computes two operations of SSDLite MobileDet as published (086 and 087)"
NO_RELEASE = "No Mesa release npuctl knows computes ssdlite as real RK3588 boards show"


@pytest.mark.parametrize(
    ("installed", "status", "words"),
    [
        ("26.2.6-1", "info", f"Mesa Teflon 26.2.6-1: {MOBILEDET}"),
        ("26.2.9-1", "info", f"Mesa Teflon 26.2.9-1: {MOBILEDET}"),
        ("26.1.6-1~bpo13+1", "warning", "Mesa Teflon 26.1.6-1~bpo13+1: computes 1x1 convolutions"),
        ("25.3.2-1", "info", "a release this npuctl was not checked against"),
    ],
)
def test_the_doctor_knows_what_the_installed_teflon_computes(
    rocket, image, installed, status, words
):
    """teflon.version, from the family's teflon.yaml (derived from what real boards compute):
    a release whose wrongs the wanted one computes right is a warning with the upgrade as its
    fix; what no known release computes (SSDLite MobileDet as published, on real boards) is
    said, with the golden check as this board's own answer, and never as an upgrade; the
    JSON carries the version."""
    image.teflon_version(installed)
    image.teflon_candidate("26.2.6-1")
    code, checks = doctor(rocket, image, "--quick")
    finding = checks["teflon.version"]
    assert finding["status"] == status, finding
    assert words in finding["summary"], finding
    if installed.startswith("26.1"):
        assert code == 10
        assert "adds (residual additions, ADD) wrongly" in finding["summary"]
        assert "Of the models npuctl serves: mobilenet-v2, ssdlite." in finding["detail"]
        assert "MobileNet V2 as published" in finding["detail"]
        assert "Mesa 26.2 computes mobilenet-v2." in finding["detail"]
        assert NO_RELEASE in finding["detail"]
        assert finding["fix"] == "sudo npuctl provision --only teflon-pin --only teflon"
    elif installed.startswith("26.2"):
        assert code == 0, not_ok(checks)
        assert "Of the models npuctl serves: ssdlite." in finding["detail"]
        assert NO_RELEASE in finding["detail"]
        assert "residual additions" not in finding["summary"] + finding["detail"]
        assert "Mesa 26.2 computes" not in finding["detail"]
        assert not finding.get("fix")
    else:
        assert code == 0, not_ok(checks)
        assert not finding.get("fix")
    bundle = image.root.parent / "bundle.tar.gz"
    result = rocket.npuctl(
        "doctor", "--json", "--quick", "--bundle", str(bundle),
        extra_env={"NPUCTL_ROOT": str(image.root), "NPUCTL_IDENTITY": USER,
                   "NPUCTL_TEFLON": DEFAULT_DELEGATE},
    )  # fmt: skip
    assert json.loads(result.stdout)["facts"]["teflon"] == installed
    with tarfile.open(bundle) as archive:
        member = archive.extractfile("npuctl-doctor/doctor.json")
        assert member is not None
        assert json.loads(member.read())["facts"]["teflon"] == installed


def test_quick_skips_only_the_golden_check(rocket, image):
    code, checks = doctor(rocket, image, "--quick")
    assert code == 0, not_ok(checks)
    assert checks["golden"]["status"] == "skipped"


def test_human_output_puts_the_fix_under_the_finding(rocket, image):
    image.teflon_version("25.0.7-2")
    result = rocket.npuctl(
        "doctor",
        "--quick",
        extra_env={
            "NPUCTL_ROOT": str(image.root),
            "NPUCTL_IDENTITY": USER,
            "NPUCTL_TEFLON": DEFAULT_DELEGATE,
        },
    )
    assert result.returncode == 11
    lines = result.stdout.splitlines()
    index = next(i for i, line in enumerate(lines) if "too old to drive rocket" in line)
    assert lines[index].startswith("[✗] Mesa Teflon 25.0.7-2")
    assert lines[index + 1].strip().startswith("fix: sudo npuctl provision --only backports")


# rocket loaded from the root file system, after the kernel switched the unused supply off.
LATE_LOG = (
    "[   31.2] vdd_npu_s0: disabling\n"
    "[   45.0] rocket fdab0000.npu: Rockchip NPU core 0 version: 1179210309\n"
)
LATE_HOOK = "usr/share/initramfs-tools/hooks/rocket-dkms"


def breaks(name):
    """Scenario name -> (how to break the image, finding id, words of the summary, fix)."""
    base = "sys/firmware/devicetree/base"
    return {
        "not-rk3588": (
            lambda i: i.write(f"{base}/compatible", "radxa,rock-5b\0rockchip,rk3568\0"),
            "platform.npu",
            "none of the supported NPUs",
            "nothing to fix here",
        ),
        "nodes-disabled": (
            lambda i: i.write(f"{base}/npu@fdac0000/status", "disabled\0"),
            "platform.npu",
            "npu@fdac0000 are disabled",
            "device-tree overlay",
        ),
        "vendor-rknpu": (
            lambda i: (i.root / "sys/module/rknpu").mkdir(parents=True),
            "vendor.rknpu",
            "rknpu is loaded",
            "sudo update-initramfs -u && sudo reboot",
        ),
        "no-accel": (
            lambda i: i.write(f"boot/config-{RELEASE}", "# CONFIG_DRM_ACCEL is not set\n"),
            "kernel.accel",
            "CONFIG_DRM_ACCEL is off",
            "-t trixie-backports linux-image-arm64",
        ),
        "not-built": (
            lambda i: (i.remove("sys/module/rocket"), i.dkms_status("")),
            "dkms.installed",
            "is absent for the running kernel",
            "sudo dkms install rocket/7.2.8 -k",
        ),
        "not-loaded": (
            lambda i: i.remove("sys/module/rocket"),
            "module.loaded",
            "rocket is not loaded",
            "sudo modprobe rocket",
        ),
        "no-headers": (
            lambda i: i.remove(f"lib/modules/{RELEASE}/build"),
            "kernel.headers",
            "no headers, DKMS cannot build",
            f"sudo apt install linux-headers-{RELEASE}",
        ),
        "secure-boot-key": (
            lambda i: i.secure_boot(enabled=True, enrolled=False),
            "secureboot",
            "the kernel refuses rocket.ko",
            "sudo mokutil --import /var/lib/dkms/mok.pub",
        ),
        "shadowed": (
            lambda i: i.modinfo(
                f"/lib/modules/{RELEASE}/kernel/drivers/accel/rocket/rocket.ko.xz", "7.3.1-arm64"
            ),
            "module.file",
            "not the DKMS build for this kernel",
            "sudo rm /lib/modules/",
        ),
        "two-cores": (
            lambda i: i.dmesg(
                "[ 4.1] rocket fdab0000.npu: Rockchip NPU core 0 version: 1\n"
                "[ 4.2] rocket fdac0000.npu: Rockchip NPU core 1 version: 1\n"
                "[ 4.3] rocket fdad0000.npu: failed to get resets for core\n"
            ),
            "cores.probed",
            "2 of 3 probed",
            "dmesg | grep",
        ),
        "late-load": (
            lambda i: i.dmesg(LATE_LOG),
            "cores.probed",
            "1 of 3 probed (rocket loaded too late)",
            "echo rocket | sudo tee -a /etc/initramfs-tools/modules && "
            f"sudo update-initramfs -u -k {RELEASE}",
        ),
        "late-load-hooked": (
            lambda i: (i.dmesg(LATE_LOG), i.write(LATE_HOOK, "#!/bin/sh\n")),
            "cores.probed",
            "(rocket loaded too late)",
            f"sudo update-initramfs -u -k {RELEASE} && sudo reboot   # rocket-dkms's hook",
        ),
        "late-load-in-initramfs": (
            lambda i: (
                i.dmesg(LATE_LOG),
                i.write(LATE_HOOK, "#!/bin/sh\n"),
                i.write(f"boot/initrd.img-{RELEASE}", "initramfs"),
                i.command(
                    "lsinitramfs", f"echo usr/lib/modules/{RELEASE}/updates/dkms/rocket.ko.xz"
                ),
            ),
            "cores.probed",
            "(rocket loaded too late)",
            "regulator_ignore_unused",
        ),
        "late-load-unbound": (
            lambda i: (
                i.dmesg("[   31.2] vdd_npu_s0: disabling\n"),
                i.remove("sys/bus/platform/drivers/rocket"),
            ),
            "module.bound",
            "loaded but not bound",
            "update-initramfs",
        ),
        "no-device": (
            lambda i: i.remove("dev/accel/accel0"),
            "device.node",
            "/dev/accel/accel0 does not exist",
            "sudo modprobe rocket",
        ),
        "world-writable": (
            lambda i: i.accel(0o666),
            "device.node",
            "world-writable",
            "udevadm trigger",
        ),
        "not-in-render": (
            lambda i: i.accel(0o660, gid=0),
            "device.access",
            "cannot open it",
            "sudo usermod -aG root opi",
        ),
        "no-teflon": (
            lambda i: i.remove("usr/lib/teflon/libteflon.so"),
            "teflon.installed",
            "is not installed",
            "sudo npuctl provision --only backports --only teflon-pin --only teflon",
        ),
        "old-teflon": (
            lambda i: i.teflon_version("25.0.7-2"),
            "teflon.version",
            "too old to drive rocket",
            "--only teflon",
        ),
    }[name]


@pytest.mark.parametrize(
    "scenario",
    [
        "not-rk3588",
        "nodes-disabled",
        "vendor-rknpu",
        "no-accel",
        "not-built",
        "not-loaded",
        "no-headers",
        "secure-boot-key",
        "shadowed",
        "two-cores",
        "late-load",
        "late-load-hooked",
        "late-load-in-initramfs",
        "late-load-unbound",
        "no-device",
        "world-writable",
        "not-in-render",
        "no-teflon",
        "old-teflon",
    ],
)
def test_each_broken_thing_has_its_finding_and_fix(rocket, image, scenario):
    breaking, finding, words, fix = breaks(scenario)
    breaking(image)
    code, checks = doctor(rocket, image, "--quick")
    assert code == 11
    assert checks[finding]["status"] == "failure", not_ok(checks)
    assert words in checks[finding]["summary"]
    assert fix in checks[finding]["fix"]


def test_a_kernel_with_its_own_rocket_needs_no_dkms(rocket, image):
    image.write(
        f"boot/config-{RELEASE}",
        "CONFIG_ARM64=y\nCONFIG_DRM_ACCEL=y\nCONFIG_DRM_ACCEL_ROCKET=m\n",
    )
    image.dkms_status("")
    image.modinfo(f"/lib/modules/{RELEASE}/kernel/drivers/accel/rocket/rocket.ko.xz", RELEASE)
    code, checks = doctor(rocket, image, "--quick")
    assert code == 0, not_ok(checks)
    assert "has its own rocket (CONFIG_DRM_ACCEL_ROCKET=m)" in checks["dkms.installed"]["summary"]
    assert checks["module.file"]["summary"].endswith("kernel/drivers/accel/rocket/rocket.ko.xz")


def test_a_failed_kernel_side_skips_the_delegate_probe(rocket, image):
    image.remove("sys/module/rocket")
    _, checks = doctor(rocket, image, "--quick")
    assert checks["device.node"]["status"] == "skipped"
    assert checks["delegate.probe"]["status"] == "skipped"
    assert checks["teflon.installed"]["status"] == "ok"  # user space is still checked


def test_teflon_cannot_open_the_device(rocket, image, tmp_path):
    env = {"TEFLON_DOUBLE_DEVICE": str(tmp_path / "absent")}
    code, checks = doctor(rocket, image, "--quick", env=env)
    assert code == 11
    probe = checks["delegate.probe"]
    assert "Couldn't open kernel device" in probe["summary"]
    assert probe["fix"]


def test_more_than_4_gb_warns_with_the_workaround(rocket, image):
    image.write("proc/meminfo", "MemTotal:       16303000 kB\n")
    code, checks = doctor(rocket, image, "--quick")
    assert code == 10
    assert checks["memory.iommu"]["status"] == "warning"
    assert "mem=3838M" in checks["memory.iommu"]["fix"]
    image.write("proc/cmdline", "root=/dev/mmcblk0p2 mem=3838M")
    assert doctor(rocket, image, "--quick")[0] == 0


def test_golden_check_without_the_model(rocket, image):
    code, checks = doctor(rocket, image)
    assert code == 11
    assert checks["golden"]["fix"] == "npuctl models fetch mobilenet"


def test_platform_forced_on_a_zhouyi_board_says_so(rocket, image, tmp_path):
    from .board_image import BoardImage

    zhouyi = BoardImage(tmp_path / "zhouyi")
    code, checks = doctor(rocket, zhouyi, "--quick", env={"NPUCTL_PLATFORM": "rocket"})
    assert code == 11
    assert "is not an RK3588" in checks["platform.soc"]["summary"]
    assert checks["user-space"]["status"] == "skipped"
    assert "memory.iommu" not in checks


def test_the_probe_gives_a_detectors_answers_and_mesas_measure(rocket, detector):
    """The golden probe on a detector, as the emulated board's cases run it: both sides'
    detections as rows, and Mesa's element-by-element measure over every output (0 where the
    delegate takes nothing; far over Mesa's tolerance where the "NPU" answers zeros)."""

    def probe(extra: dict[str, str]) -> dict:
        command = [sys.executable, "-m", "npuctl.platforms.rocket.probe", "golden"]
        result = subprocess.run(
            [*command, str(detector), str(rocket.delegate)],
            capture_output=True, text=True, check=False, timeout=300,
            env={**rocket.env, **extra},
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout.strip().splitlines()[-1])

    same = probe({})
    assert same["ok"] and same["passed"] and same["max_difference"] == 0, same
    assert same["detections"]["npu"] == same["detections"]["cpu"]
    assert same["detections"]["cpu"], same  # the pattern gives the detector's rows
    assert all(len(row) == 6 for row in same["detections"]["cpu"])
    zeros = probe({"TEFLON_DOUBLE_INFER_MS": "1"})
    assert zeros["ok"] and not zeros["passed"] and zeros["max_difference"] > 6, zeros
