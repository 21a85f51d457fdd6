"""The rocket checks in dependency order: SoC and device tree, the vendor rknpu stack, the
kernel's accel core, the rocket module, the three cores, /dev/accel/accel0, Mesa Teflon, the
TFLite runtime, a delegate probe in a child, memory (the >4 GB IOMMU bug), and the golden
check (NPU against CPU). A failed prerequisite skips what depends on it, saying why."""

from __future__ import annotations

import re
import stat
from pathlib import Path

from npuctl.child import run_module
from npuctl.doctor.findings import NO_NPU_FIX, Finding, Report, Status, skip
from npuctl.doctor.run import Options, board_name
from npuctl.models.store import Lock, verify
from npuctl.system import System

from . import DEFAULT_DELEGATE, locate
from .golden import TOLERANCE
from .probe import LOADED, NO_DEVICE
from .probe import MODULE as PROBE_MODULE

MODULE = "rocket"
CORE = "rockchip,rk3588-rknn-core"
DEVICE = "/dev/accel/accel0"
TEFLON_PACKAGE = "mesa-teflon-delegate"
TEFLON_MINIMUM = (25, 3)  # Mesa added the rocket driver to Teflon in 25.3
TEFLON_FIX = "sudo npuctl provision --only backports --only teflon-pin --only teflon"
CORES = 3
MEMORY_LIMIT_KB = 4 * 1024 * 1024
MEMORY_WORKAROUND = "mem=3838M"


def kernel_log(system: System) -> list[str]:
    result = system.run("dmesg")
    if result is None or not result.ok:
        return []
    return [line for line in result.stdout.splitlines() if re.search(r"rocket|rknpu|npu", line)]


def check(system: System, options: Options, report: Report) -> None:
    delegate = Path(str(options.platform_options.get("delegate") or DEFAULT_DELEGATE))
    steps = [
        ("platform", "SoC and NPU device tree", _platform),
        ("vendor", "Vendor rknpu stack", _vendor),
        ("kernel", "Kernel accel core", _kernel),
        ("module", "rocket module", _module),
        ("cores", "NPU cores", _cores),
        ("device", DEVICE, _device),
    ]
    for index, (_area, what, step) in enumerate(steps):
        if not step(system, report):
            for later_area, later_what, _ in steps[index + 1 :]:
                skip(report, later_area, later_area, later_what, f"{what.lower()} failed")
            if index == 0:  # not an RK3588 with its NPU: user space is beside the point
                skip(report, "user-space", "teflon", "Teflon, runtime and NPU", "no RK3588 NPU")
            else:
                _user_space(system, options, report, delegate, kernel_ready=False)
            return
    _user_space(system, options, report, delegate, kernel_ready=True)


def _user_space(
    system: System, options: Options, report: Report, delegate: Path, kernel_ready: bool
) -> None:
    teflon = _teflon(system, report, delegate)
    runtime = _runtime(report)
    _memory(system, report)
    if not (teflon and kernel_ready):
        reason = "the kernel side is not ready" if teflon else "Teflon is not usable"
        skip(report, "delegate", "delegate", "Delegate probe", reason)
        skip(report, "golden", "golden", "Golden check", reason)
        return
    if not _delegate_probe(system, report, delegate, options.timeout_s):
        skip(report, "golden", "golden", "Golden check", "the delegate does not load")
        return
    if options.quick:
        skip(report, "golden", "golden", "Golden check", "--quick")
    elif not runtime:
        skip(report, "golden", "golden", "Golden check", "no TFLite runtime")
    else:
        _golden(system, options, report, delegate)


def _platform(system: System, report: Report) -> bool:
    where = locate(system)
    board = board_name(system)
    if where is None:
        report.add(
            Finding(
                "platform.soc",
                "platform",
                Status.FAIL,
                f"Platform: {board} is not an RK3588 (no rockchip,rk3588 in the device tree)",
                fix=NO_NPU_FIX,
            )
        )
        return False
    nodes = [
        path.rsplit("/", 1)[0]
        for path in system.glob("/sys/firmware/devicetree/base/*/compatible")
        if CORE in (system.read(path) or "")
    ]
    if not nodes:
        report.add(
            Finding(
                "platform.npu",
                "platform",
                Status.FAIL,
                f"NPU: the device tree of {board} has no {CORE} nodes",
                "The kernel's device tree for this board describes no NPU.",
                fix="boot a kernel whose device tree has the NPU nodes: sudo apt install -t "
                "trixie-backports linux-image-arm64",
            )
        )
        return False
    disabled = [
        node.rsplit("/", 1)[-1]
        for node in nodes
        if (system.read(f"{node}/status") or "okay").strip("\0") not in ("okay", "ok")
    ]
    if disabled:
        report.add(
            Finding(
                "platform.npu",
                "platform",
                Status.FAIL,
                f"NPU: device-tree nodes {', '.join(disabled)} are disabled",
                "The board's device tree switches the NPU off.",
                fix='enable them with a device-tree overlay that sets status = "okay" on '
                f"{', '.join(disabled)} (armbian-config or /boot/dtb overlays), then reboot",
            )
        )
        return False
    report.add(
        Finding(
            "platform.npu",
            "platform",
            Status.OK,
            f"Platform: {board}, {where}, {len(nodes)} NPU core nodes enabled",
        )
    )
    return True


def _vendor(system: System, report: Report) -> bool:
    traces = [
        path for path in ("/sys/module/rknpu", "/proc/rknpu") if system.exists(path)
    ] + system.glob("/dev/rknpu*")
    drm = [
        path
        for path in system.glob("/sys/class/drm/*/device/driver")
        if system.path(path).resolve().name == "rknpu"
    ]
    if traces or drm:
        report.add(
            Finding(
                "vendor.rknpu",
                "vendor",
                Status.FAIL,
                f"Vendor NPU driver rknpu is loaded ({', '.join(traces + drm)}): it and rocket "
                "cannot share the NPU",
                fix="sudo npuctl provision --only rknpu-blacklist && sudo reboot",
            )
        )
        return False
    report.add(Finding("vendor.rknpu", "vendor", Status.OK, "No vendor rknpu driver loaded"))
    return True


def kernel_config(system: System) -> dict[str, str] | None:
    release = system.kernel_release()
    for path in (f"/boot/config-{release}", f"/lib/modules/{release}/build/.config"):
        text = system.read(path)
        if text is not None:
            return dict(
                line.split("=", 1) for line in text.splitlines() if line.startswith("CONFIG_")
            )
    return None


def _kernel(system: System, report: Report) -> bool:
    release = system.kernel_release()
    config = kernel_config(system)
    if config is None:
        report.add(
            Finding(
                "kernel.accel",
                "kernel",
                Status.WARN,
                f"Kernel {release}: its configuration is not readable (/boot/config-{release})",
                "Whether it has the DRM accel core is judged from the module below.",
            )
        )
        return True
    if config.get("CONFIG_DRM_ACCEL") != "y":
        report.add(
            Finding(
                "kernel.accel",
                "kernel",
                Status.FAIL,
                f"Kernel {release}: CONFIG_DRM_ACCEL is off, rocket cannot run on it",
                "Debian's trixie-backports kernel (7.3) has the accel core.",
                fix="sudo apt install -t trixie-backports linux-image-arm64 linux-headers-arm64",
            )
        )
        return False
    report.facts["rocket_built_in"] = config.get("CONFIG_DRM_ACCEL_ROCKET") == "y"
    report.add(
        Finding("kernel.accel", "kernel", Status.OK, f"Kernel {release} with the DRM accel core")
    )
    return True


def _dkms_state(system: System, release: str) -> str | None:
    result = system.run("dkms", "status", "-m", MODULE)
    if result is None:
        return None
    for line in result.stdout.splitlines():
        match = re.match(rf"^{MODULE}/([^,]+), ([^,]+), [^:]+: (\S+)", line.strip())
        if match and match[2] == release:
            return match[3].rstrip(",")
    return "absent"


def _module(system: System, report: Report) -> bool:
    release = system.kernel_release()
    if report.facts.get("rocket_built_in"):
        report.add(Finding("module.rocket", "module", Status.OK, "rocket is built into the kernel"))
        return True
    state = _dkms_state(system, release)
    loaded = system.exists("/sys/module/rocket")
    if loaded:
        origin = "DKMS" if state == "installed" else "the kernel's own"
        report.add(Finding("module.rocket", "module", Status.OK, f"rocket loaded ({origin})"))
        return True
    if state is None or state == "absent":
        headers = system.exists(f"/lib/modules/{release}/build")
        report.add(
            Finding(
                "module.rocket",
                "module",
                Status.FAIL,
                f"rocket: not built for {release}",
                "" if headers else f"No headers for {release}: DKMS cannot build it.",
                fix="sudo apt install ./rocket-dkms_<version>_all.deb"
                if headers
                else f"sudo apt install linux-headers-{release}",
            )
        )
        return False
    if state != "installed":
        report.add(
            Finding(
                "module.rocket",
                "module",
                Status.FAIL,
                f"rocket: DKMS state {state} for {release}",
                fix=f"sudo dkms autoinstall -k {release}",
            )
        )
        return False
    report.add(
        Finding(
            "module.rocket",
            "module",
            Status.FAIL,
            f"rocket: installed by DKMS for {release} but not loaded",
            fix="sudo modprobe rocket",
        )
    )
    return False


def _cores(system: System, report: Report) -> bool:
    result = system.run("dmesg")
    if result is None or not result.ok:
        report.add(
            Finding(
                "cores.probed",
                "cores",
                Status.INFO,
                "NPU cores: the kernel log is not readable here (run as root to check)",
            )
        )
        return True
    cores = sorted(set(re.findall(r"Rockchip NPU core (\d+) version", result.stdout)))
    if len(cores) >= CORES:
        report.add(Finding("cores.probed", "cores", Status.OK, f"{CORES} NPU cores probed"))
        return True
    regulator = "vdd_npu" in result.stdout
    report.add(
        Finding(
            "cores.probed",
            "cores",
            Status.FAIL,
            f"NPU cores: {len(cores)} of {CORES} probed",
            "A late-loading rocket can lose the NPU regulator (vdd_npu_s0) to the kernel's "
            "regulator clean-up; loading it from the initramfs avoids that."
            + (" The log names vdd_npu." if regulator else ""),
            fix="echo rocket | sudo tee -a /etc/initramfs-tools/modules && "
            "sudo update-initramfs -u && sudo reboot",
        )
    )
    return False


def _device(system: System, report: Report) -> bool:
    info = system.stat(DEVICE)
    if info is None or not stat.S_ISCHR(info.st_mode):
        report.add(
            Finding(
                "device.node",
                "device",
                Status.FAIL,
                f"{DEVICE} does not exist" if info is None else f"{DEVICE} is not a device",
                fix="sudo modprobe rocket",
            )
        )
        return False
    mode = stat.S_IMODE(info.st_mode)
    group = system.group_name(info.st_gid)
    description = f"{DEVICE}: group {group}, mode {mode:04o}"
    if mode & 0o002:
        report.add(
            Finding(
                "device.node",
                "device",
                Status.FAIL,
                f"{description}: world-writable, any user can drive the NPU",
                "A rule giving MODE=0666 overrides the package's (group render, 0660).",
                fix="remove the 0666 accel rule from /etc/udev/rules.d, then sudo udevadm "
                "trigger --action=add --subsystem-match=accel",
            )
        )
        return False
    if not system.may_open(info):
        report.add(
            Finding(
                "device.access",
                "device",
                Status.FAIL,
                f"{description}: user {system.identity.name} cannot open it",
                "Membership takes effect at the next login.",
                fix=f"sudo usermod -aG {group} {system.identity.name}",
            )
        )
        return False
    report.add(
        Finding(
            "device.node",
            "device",
            Status.OK,
            f"{description}; {system.identity.name} may open it",
        )
    )
    return True


def teflon_version(system: System) -> str | None:
    result = system.run("dpkg-query", "-W", "-f=${Version}", TEFLON_PACKAGE)
    return result.stdout.strip() if result and result.ok and result.stdout.strip() else None


def teflon_release(version: str | None) -> tuple[int, int] | None:
    """Mesa's major and minor release from a Debian version ("1:26.1.6-1~bpo13+1")."""
    numbers = re.match(r"^(?:\d+:)?(\d+)\.(\d+)", version or "")
    return (int(numbers[1]), int(numbers[2])) if numbers else None


def _teflon(system: System, report: Report, delegate: Path) -> bool:
    if not system.exists(str(delegate)):
        report.add(
            Finding(
                "teflon.installed",
                "teflon",
                Status.FAIL,
                f"Mesa Teflon: {delegate} is not installed",
                "Debian packages a Teflon that drives rocket in trixie-backports (Mesa 26).",
                fix=TEFLON_FIX,
            )
        )
        return False
    version = teflon_version(system)
    if str(delegate) == DEFAULT_DELEGATE and version is not None:
        release = teflon_release(version)
        if release is not None and release < TEFLON_MINIMUM:
            report.add(
                Finding(
                    "teflon.version",
                    "teflon",
                    Status.FAIL,
                    f"Mesa Teflon {version}: too old to drive rocket (needs 25.3 or newer)",
                    fix=TEFLON_FIX,
                )
            )
            return False
    report.facts["teflon"] = version
    report.add(
        Finding(
            "teflon.installed",
            "teflon",
            Status.OK,
            f"Mesa Teflon {version or '(not from a package)'}: {delegate}",
        )
    )
    return True


def _runtime(report: Report) -> bool:
    from .litert import MISSING_FIX, RuntimeMissing, load_module

    try:
        module = load_module()
    except RuntimeMissing:
        report.add(
            Finding(
                "runtime.litert",
                "runtime",
                Status.FAIL,
                "TFLite runtime: ai-edge-litert is not installed (Debian has no package of it)",
                fix=MISSING_FIX,
            )
        )
        return False
    report.add(
        Finding("runtime.litert", "runtime", Status.OK, f"TFLite runtime: {module.__name__}")
    )
    return True


def _memory(system: System, report: Report) -> None:
    text = system.read("/proc/meminfo") or ""
    match = re.search(r"^MemTotal:\s+(\d+) kB", text, re.MULTILINE)
    if not match:
        return
    total = int(match[1])
    command_line = system.read("/proc/cmdline") or ""
    if total > MEMORY_LIMIT_KB and "mem=" not in command_line:
        report.add(
            Finding(
                "memory.iommu",
                "memory",
                Status.WARN,
                f"Memory: {total // 1024} MiB, above 4 GB: the NPU's IOMMU page tables can "
                "give wrong results or IOMMU faults (a known rocket bug)",
                f"The documented workaround is to boot with {MEMORY_WORKAROUND}.",
                fix=f"add {MEMORY_WORKAROUND} to the kernel command line (/etc/default/"
                "u-boot or the bootloader's extlinux.conf), then reboot",
            )
        )
        return
    report.add(Finding("memory.iommu", "memory", Status.OK, f"Memory: {total // 1024} MiB"))


def _delegate_probe(system: System, report: Report, delegate: Path, timeout: float) -> bool:
    result = run_module(PROBE_MODULE, ["delegate", str(system.path(str(delegate)))], timeout)
    stderr = result.stderr.strip()
    if result.answer is not None and result.answer.get("ok") and NO_DEVICE not in stderr:
        said = next((line for line in stderr.splitlines() if LOADED in line), "")
        report.add(
            Finding(
                "delegate.probe",
                "delegate",
                Status.OK,
                "Teflon delegate loads" + (f": {said.strip()}" if said else ""),
            )
        )
        return True
    if NO_DEVICE in stderr:
        summary = f"Teflon delegate: {NO_DEVICE} (it found no rocket device it may open)"
        fix = "npuctl doctor's device findings above say why; then sudo modprobe rocket"
    elif result.answer is None:
        summary, fix = f"Teflon delegate: loading it {result.problem}", None
    else:
        summary, fix = f"Teflon delegate: {result.answer.get('error')}", TEFLON_FIX
    report.add(Finding("delegate.probe", "delegate", Status.FAIL, summary, stderr[-500:], fix=fix))
    return False


def _golden(system: System, options: Options, report: Report, delegate: Path) -> None:
    entry = options.manifest.get("mobilenet")
    check = verify(entry, options.models_dir, Lock.load(options.models_dir))
    if check.state in ("missing", "invalid", "mismatch"):
        report.add(
            Finding(
                "golden",
                "golden",
                Status.FAIL,
                f"Golden check: {check.detail}",
                fix="npuctl models fetch mobilenet",
            )
        )
        return
    args = ["golden", str(check.path), str(system.path(str(delegate)))]
    result = run_module(PROBE_MODULE, args, options.timeout_s)
    answer = result.answer
    if answer is None or not answer.get("ok"):
        problem = result.problem if answer is None else answer.get("error")
        report.add(Finding("golden", "golden", Status.FAIL, f"Golden check: the model {problem}"))
        return
    verdict = str(answer.get("verdict"))
    if not answer.get("passed"):
        report.add(
            Finding(
                "golden",
                "golden",
                Status.FAIL,
                f"Golden check: the NPU and the CPU disagree: {verdict}",
                f"Mesa's own tests allow a difference of {TOLERANCE}. On boards with more "
                "than 4 GB see the memory finding.",
                fix=f"boot with {MEMORY_WORKAROUND}, then npuctl doctor again",
            )
        )
        return
    report.add(
        Finding("golden", "golden", Status.OK, f"Golden check: NPU and CPU agree: {verdict}")
    )
