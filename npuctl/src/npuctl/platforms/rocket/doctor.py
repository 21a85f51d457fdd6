"""The rocket doctor's stages. The board: SoC and device tree. The driver: the vendor rknpu
stack, the kernel's accel core, the rocket driver's shared checks (headers, DKMS or the
kernel's own copy, Secure Boot, the module, bound), the three cores, the device node. The user
space: Mesa Teflon, the TFLite runtime, memory (the >4 GB IOMMU bug), a delegate probe in a
child. The models: the golden check (NPU against CPU), each model in a child."""

from __future__ import annotations

import re
from pathlib import Path

from npuctl.child import run_module
from npuctl.doctor.chain import Step
from npuctl.doctor.dkms_driver import DriverChecks, UnboundExplainer, kernel_config
from npuctl.doctor.findings import NO_NPU_FIX, Finding, Report, Status, skip
from npuctl.doctor.options import Options
from npuctl.drivers import for_platform
from npuctl.models.store import Lock, verify
from npuctl.platform import Board
from npuctl.system import System, board_name

from . import late_load
from . import teflon as teflon_description
from .child import LOADED, NO_DEVICE
from .child import MODULE as PROBE_MODULE
from .facts import DEFAULT_DELEGATE, locate
from .golden import TOLERANCE

DRIVER = for_platform("rocket")
CORE = DRIVER.compatibles[0]
TEFLON_FIX = "sudo npuctl provision --only backports --only teflon-pin --only teflon"
CORES = 3
MEMORY_LIMIT_KB = 4 * 1024 * 1024
MEMORY_WORKAROUND = "mem=3838M"
# The modprobe.d file of rocket-dkms that keeps the vendor's rknpu from loading.
BLACKLIST = next(iter(DRIVER.board_files_named("blacklist-rknpu.conf")), "")


def _delegate(options: Options) -> Path:
    return Path(str(options.platform_options.get("delegate") or DEFAULT_DELEGATE))


def check_board(system: System, report: Report) -> Board | None:
    enabled = _platform(system, report)
    if not enabled:
        for finding_id, what in (
            ("kernel", "Kernel, DKMS, module and device"),
            ("user-space", "Teflon, runtime and NPU"),
        ):
            skip(report, finding_id, finding_id.split("-")[0], what, "no RK3588 NPU")
        return None
    return Board(locate(system) or "", enabled)


def driver_steps(system: System, report: Report, board: Board) -> list[Step]:
    driver = DriverChecks(system, DRIVER, report, explain_unbound=_late_load_explainer(system))
    return [
        Step(
            "vendor",
            "vendor.rknpu",
            "vendor",
            "Vendor rknpu stack",
            lambda: _vendor(system, report),
            failed="the vendor rknpu driver holds the NPU",
        ),
        Step(
            "kernel",
            "kernel.accel",
            "kernel",
            "Kernel accel core",
            lambda: _kernel(system, report),
            ("vendor",),
            "the kernel has no DRM accel core",
        ),
        *driver.steps(needs=("kernel",)),
        Step(
            "cores",
            "cores.probed",
            "cores",
            "NPU cores",
            lambda: _cores(system, report, board.cores),
            ("bound",),
            "the NPU cores did not probe",
        ),
        driver.device_step(needs=("cores",)),
    ]


def user_space_steps(system: System, options: Options, report: Report) -> list[Step]:
    delegate = _delegate(options)
    return [
        Step(
            "teflon",
            "teflon.installed",
            "teflon",
            "Mesa Teflon",
            lambda: _teflon(system, report, delegate),
            failed="Teflon is not usable",
        ),
        Step(
            "runtime",
            "runtime.litert",
            "runtime",
            "TFLite runtime",
            lambda: _runtime(report),
            failed="no TFLite runtime",
        ),
        Step("memory", "memory.iommu", "memory", "Memory", lambda: _memory(system, report)),
        Step(
            "delegate",
            "delegate.probe",
            "delegate",
            "Delegate probe",
            lambda: _delegate_probe(system, report, delegate, options.timeout_s),
            ("teflon", "device"),
            "the delegate does not load",
        ),
    ]


def model_steps(system: System, options: Options, report: Report) -> list[Step]:
    def golden() -> bool | None:
        if options.quick:
            skip(report, "golden", "golden", "Golden check", "--quick")
            return None
        _golden(system, options, report, _delegate(options))
        return None

    return [Step("golden", "golden", "golden", "Golden check", golden, ("delegate", "runtime"))]


def _platform(system: System, report: Report) -> int:
    """How many NPU cores the device tree enables (0: none, nothing more to check)."""
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
        return 0
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
        return 0
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
                "The board's device tree switches "
                + (
                    "the NPU off."
                    if len(disabled) == len(nodes)
                    else f"those cores off; the other {len(nodes) - len(disabled)} are checked "
                    "below."
                ),
                fix='enable them with a device-tree overlay that sets status = "okay" on '
                f"{', '.join(disabled)} (armbian-config or /boot/dtb overlays), then reboot",
            )
        )
        return len(nodes) - len(disabled)
    report.add(
        Finding(
            "platform.npu",
            "platform",
            Status.OK,
            f"Platform: {board}, {where}, {len(nodes)} NPU core nodes enabled",
        )
    )
    return len(nodes)


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
                "rocket-dkms blacklists rknpu (" + (BLACKLIST or "its modprobe.d file") + "); "
                "the blacklist takes effect once the initramfs is rebuilt and the board reboots.",
                fix=(
                    "sudo update-initramfs -u && sudo reboot"
                    if BLACKLIST and system.exists(BLACKLIST)
                    else f"sudo apt install {DRIVER.package} && sudo update-initramfs -u && "
                    "sudo reboot"
                ),
            )
        )
        return False
    report.add(Finding("vendor.rknpu", "vendor", Status.OK, "No vendor rknpu driver loaded"))
    return True


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
    report.add(
        Finding("kernel.accel", "kernel", Status.OK, f"Kernel {release} with the DRM accel core")
    )
    return True


def _cores(system: System, report: Report, enabled: int = CORES) -> bool:
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
    if len(cores) >= enabled:
        report.add(
            Finding(
                "cores.probed",
                "cores",
                Status.OK,
                f"{len(cores)} NPU core{'s' if len(cores) != 1 else ''} probed",
            )
        )
        return True
    diagnosis = late_load.diagnose(system, result.stdout, system.kernel_release())
    report.add(
        Finding(
            "cores.probed",
            "cores",
            Status.FAIL,
            f"NPU cores: {len(cores)} of {enabled} probed"
            + (" (rocket loaded too late)" if diagnosis.late else ""),
            diagnosis.detail,
            fix=diagnosis.fix,
        )
    )
    return False


def _late_load_explainer(system: System) -> UnboundExplainer:
    """Why rocket is loaded but bound to no core, when the whole kernel log says it loaded
    after its supply was switched off."""

    def explain(_driver_lines: list[str]) -> tuple[str, str | None] | None:
        result = system.run("dmesg")
        if result is None or not result.ok:
            return None
        diagnosis = late_load.diagnose(system, result.stdout, system.kernel_release())
        return (diagnosis.detail, diagnosis.fix) if diagnosis.late else None

    return explain


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
    version = teflon_description.installed(system)
    known = teflon_description.description()
    if str(delegate) == DEFAULT_DELEGATE and version is not None:
        release = teflon_description.release(version)
        if release is not None and release < known.minimum:
            report.add(
                Finding(
                    "teflon.version",
                    "teflon",
                    Status.FAIL,
                    f"Mesa Teflon {version}: too old to drive rocket (needs "
                    f"{'.'.join(map(str, known.minimum))} or newer)",
                    fix=TEFLON_FIX,
                )
            )
            return False
    report.facts["teflon"] = version
    # The family-neutral name the fleet labels read (npuctl doctor --nfd).
    versions = report.facts.setdefault("versions", {})
    if isinstance(versions, dict):
        versions["umd"] = version
    report.add(
        Finding(
            "teflon.installed",
            "teflon",
            Status.OK,
            f"Mesa Teflon {version or '(not from a package)'}: {delegate}",
        )
    )
    if str(delegate) == DEFAULT_DELEGATE and version is not None:
        report.add(_known_release(system, version))
    return True


def _upgrade_fix(system: System) -> str:
    """The wanted release from the board's sources when one offers it (the project's
    trixie-teflon suite, once pinned), else how to add that suite first."""
    wanted = teflon_description.description().wanted_release
    provision = "sudo npuctl provision --only teflon-pin --only teflon"
    offered = [
        teflon_description.release(version) for version in teflon_description.available(system)
    ]
    if any(release is not None and release >= wanted for release in offered):
        return provision
    return (
        "add trixie-teflon to the project's apt source (Suites: trixie trixie-teflon, "
        f"docs/installing.md), then sudo apt update && {provision}"
    )


def _known_release(system: System, version: str) -> Finding:
    """What the installed Teflon's Mesa release is known to compute wrongly on the NPU
    (teflon.yaml), and how to get the one that computes what npuctl serves."""
    known = teflon_description.description()
    wrong = known.wrong_in(version)
    wanted = ".".join(map(str, known.wanted_release))
    if wrong is None:
        return Finding(
            "teflon.version",
            "teflon",
            Status.INFO,
            f"Mesa Teflon {version}: a release this npuctl was not checked against "
            f"(it knows {', '.join('.'.join(map(str, r)) for r in sorted(known.releases))})",
            "npuctl doctor's golden checks below say whether it computes the models here.",
        )
    if not wrong:
        return Finding(
            "teflon.version",
            "teflon",
            Status.OK,
            f"Mesa Teflon {version}: computes every model npuctl serves",
        )
    served = sorted({name for item in wrong for name in item.served})
    summary = f"Mesa Teflon {version}: " + "; and ".join(item.what for item in wrong)
    detail = " ".join(f"Wrong on this release: {item.models}." for item in wrong)
    if served:
        detail += f" Of the models npuctl serves: {', '.join(served)}."
    newer = known.wanted_release > (teflon_description.release(version) or (0, 0))
    fixed = known.fixed_by_wanted(version) if newer else ()
    if fixed:
        detail += f" Mesa {wanted} computes {_named(fixed, 'them')}."
    unfixed = sorted({name for item in wrong if item not in fixed for name in item.served})
    if unfixed:
        detail += f" {UNFIXED.format(models=', '.join(unfixed))}"
    return Finding(
        "teflon.version",
        "teflon",
        Status.WARN if fixed else Status.INFO,  # the golden check says what this board computes
        summary,
        detail,
        fix=_upgrade_fix(system) if fixed else None,
    )


# Said of a served model that no Mesa release npuctl knows computes as real boards do.
UNFIXED = (
    "No Mesa release npuctl knows computes {models} as real RK3588 boards show (Mesa's CI); "
    "npuctl doctor's golden check runs it on a photograph and says what this board computes."
)


def _named(items: tuple[teflon_description.Wrong, ...], otherwise: str) -> str:
    served = sorted({name for item in items for name in item.served})
    return ", ".join(served) if served else otherwise


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


# Mesa's own test model must pass; every other model of the manifest is checked once it is
# downloaded (the detector's verdict compares detections, the classifiers' their scores).
REQUIRED_GOLDEN = "mobilenet"
# What the golden checks run on once downloaded (the served detector needs it): a camera's
# picture, where the NPU's answers matter, rather than a pattern.
GOLDEN_PHOTO = "golden-photo"


def _golden(system: System, options: Options, report: Report, delegate: Path) -> None:
    _golden_model(system, options, report, delegate, REQUIRED_GOLDEN)
    for name, entry in options.manifest.entries.items():
        if entry.kind == "model" and name != REQUIRED_GOLDEN:
            _golden_model(system, options, report, delegate, name)


def _golden_model(
    system: System, options: Options, report: Report, delegate: Path, name: str
) -> None:
    required = name == REQUIRED_GOLDEN
    finding_id = "golden" if required else f"golden.{name}"
    title = "Golden check" if required else f"Golden check, {name}"
    lock = Lock.load(options.models_dir)
    check = verify(options.manifest.get(name), options.models_dir, lock)
    if check.state == "missing" and not required:
        report.add(
            Finding(
                finding_id,
                "golden",
                Status.INFO,
                f"{title}: not downloaded (npuctl models fetch {name} to check it too)",
            )
        )
        return
    if check.state in ("missing", "invalid", "mismatch"):
        report.add(
            Finding(
                finding_id,
                "golden",
                Status.FAIL,
                f"{title}: {check.detail}",
                fix=f"npuctl models fetch {name}",
            )
        )
        return
    args = ["golden", str(check.path), str(system.path(str(delegate)))]
    photo = verify(options.manifest.get(GOLDEN_PHOTO), options.models_dir, lock)
    on = "a fixed pattern"
    if photo.state == "ok" and photo.path is not None:
        args.append(str(photo.path))
        on = f"the photograph {photo.path.name}"
    result = run_module(PROBE_MODULE, args, options.timeout_s)
    answer = result.answer
    if answer is None or not answer.get("ok"):
        problem = result.problem if answer is None else answer.get("error")
        report.add(Finding(finding_id, "golden", Status.FAIL, f"{title}: the model {problem}"))
        return
    verdict = f"{answer.get('verdict')} (on {on})"
    if not answer.get("passed"):
        detail, fix = _disagreement(system, options, report, name, answer.get("additions"))
        summary = f"{title}: the NPU and the CPU disagree: {verdict}"
        report.add(Finding(finding_id, "golden", Status.FAIL, summary, detail, fix=fix))
        return
    report.add(Finding(finding_id, "golden", Status.OK, f"{title}: NPU and CPU agree: {verdict}"))


def _disagreement(
    system: System, options: Options, report: Report, name: str, additions: object
) -> tuple[str, str]:
    """Why a model's golden check can fail, and the fix: what the installed Teflon's release
    is known to compute wrongly (teflon.yaml) when that touches this model, the memory
    workaround otherwise."""
    version = report.facts.get("teflon")
    version = version if isinstance(version, str) else None
    known = teflon_description.description().wrong_in(version) or ()
    causes = [item for item in known if name in item.served]
    if causes:
        others = [
            entry.name
            for entry in options.manifest.models_of(options.manifest.get(name).platform)
            if entry.name != name
        ]
        serve_others = f"npuctl serve --models {','.join(others)}"
        fixed = teflon_description.description().fixed_by_wanted(version)
        return (
            " ".join(f"Mesa Teflon {version} {item.what} ({item.models})." for item in causes)
            + (f" The model has {additions} additions (ADD)." if additions else "")
            + (
                f" Or serve the others: {serve_others}."
                if any(item in fixed for item in causes)
                else f" {UNFIXED.format(models=name)}"
            ),
            _upgrade_fix(system) if any(item in fixed for item in causes) else serve_others,
        )
    return (
        f"Mesa's own tests allow a difference of {TOLERANCE}. On boards with more than 4 GB "
        "see the memory finding.",
        f"boot with {MEMORY_WORKAROUND}, then npuctl doctor again",
    )
