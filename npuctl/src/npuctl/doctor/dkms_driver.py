"""The checks of a DKMS-built NPU driver, written once for every family and parameterised by
the driver's description: kernel headers, the kernel's own copy of the driver, DKMS for every
installed kernel, AUTOINSTALL, Secure Boot and the signing key, the module modprobe would
load, loaded and bound, and the device node. A platform puts these steps into its chain
between its own (the SoC before, the user space after)."""

from __future__ import annotations

import re
import stat
from collections.abc import Callable
from dataclasses import dataclass, field

from .. import trials
from ..drivers import Driver
from ..modprobe import blacklistings
from ..system import System
from .chain import Step
from .dkms_foreign import registrations, report_foreign
from .findings import Finding, Report, Status, skip

DKMS_KEY = "/var/lib/dkms/mok.pub"
SYSFS_DRIVER_FILES = {"bind", "unbind", "uevent", "module", "new_id", "remove_id"}

# (summary detail, fix) that tells why the driver is loaded but bound to nothing, or None.
UnboundExplainer = Callable[[list[str]], tuple[str, str | None] | None]


def kernel_config(system: System) -> dict[str, str] | None:
    """The running kernel's configuration, when /boot or its headers have it."""
    release = system.kernel_release()
    for path in (f"/boot/config-{release}", f"/lib/modules/{release}/build/.config"):
        text = system.read(path)
        if text is not None:
            return dict(
                line.split("=", 1) for line in text.splitlines() if line.startswith("CONFIG_")
            )
    return None


@dataclass
class DriverChecks:
    system: System
    driver: Driver
    report: Report
    explain_unbound: UnboundExplainer | None = None
    bound: list[str] = field(default_factory=list)

    @property
    def release(self) -> str:
        return self.system.kernel_release()

    def in_tree(self) -> str | None:
        """'SYMBOL=y|m' when the running kernel has the driver itself, else None."""
        config = kernel_config(self.system) or {}
        for symbol in self.driver.config_in_tree:
            if config.get(symbol) in ("y", "m"):
                return f"{symbol}={config[symbol]}"
        return None

    def steps(self, needs: tuple[str, ...]) -> list[Step]:
        """The driver's part of a chain; the first step needs ``needs``."""
        module = self.driver.module
        return [
            Step(
                "headers",
                "kernel.headers",
                "kernel",
                "Kernel headers",
                self.check_headers,
                needs,
                "no headers for the running kernel",
            ),
            Step(
                "dkms",
                "dkms.installed",
                "dkms",
                "DKMS",
                self.check_dkms,
                ("headers",),
                "DKMS has not installed it",
            ),
            Step("secureboot", "secureboot", "secureboot", "Secure Boot", self.check_secure_boot),
            Step(
                "module",
                "module.file",
                "module",
                "Module",
                self.check_module,
                ("dkms",),
                f"{module} is not loaded",
            ),
            Step(
                "bound",
                "module.bound",
                "module",
                "Driver",
                self.check_bound,
                ("module",),
                "the driver is not bound",
            ),
        ]

    def device_step(self, needs: tuple[str, ...]) -> Step:
        example = self.driver.device_example
        return Step(
            "device",
            "device.node",
            "device",
            example,
            self.check_device,
            needs,
            f"{example} is not usable",
        )

    # -- kernel headers and DKMS ------------------------------------------------------------

    def check_headers(self) -> bool:
        release = self.release
        if release == "unknown":
            self._add(
                "kernel.headers",
                Status.FAIL,
                "Kernel: cannot read its release (/proc/sys/kernel/osrelease)",
                "Is /proc mounted and readable?",
            )
            return False
        if self.system.exists(f"/lib/modules/{release}/build"):
            self._add("kernel.headers", Status.OK, f"Kernel {release} with its headers")
            return True
        own = self.in_tree()
        if own:
            self._add(
                "kernel.headers",
                Status.OK,
                f"Kernel {release}: no headers, none needed (it has its own "
                f"{self.driver.in_tree_module}, {own})",
            )
            return True
        self._add(
            "kernel.headers",
            Status.FAIL,
            f"Kernel {release}: no headers, DKMS cannot build the driver for it",
            fix=f"sudo apt install linux-headers-{release}",
        )
        return False

    def _dkms_states(self, output: str) -> dict[str, tuple[str, str]]:
        """kernel -> (version, state) from 'dkms status'."""
        states = {}
        module = re.escape(self.driver.module)
        for line in output.splitlines():
            match = re.match(rf"^{module}/([^,]+), ([^,]+), [^:]+: (.+)$", line.strip())
            if match:
                states[match[2]] = (match[1], match[3].split()[0].rstrip(","))
        return states

    def _first_error(self, version: str, kernel: str) -> str:
        module = self.driver.module
        for log in self.system.glob(
            f"/var/lib/dkms/{module}/{version}/{kernel}/*/log/make.log"
        ) + self.system.glob(f"/var/lib/dkms/{module}/{version}/build/make.log"):
            for line in (self.system.read(log) or "").splitlines():
                if re.search(r"\berror\b", line, re.IGNORECASE) and "#" not in line[:2]:
                    return line.strip()
        return ""

    def check_dkms(self) -> bool:
        system, module, package = self.system, self.driver.module, self.driver.package
        own = self.in_tree()
        if own:
            self.report.facts["driver_in_tree"] = own
            self._add(
                "dkms.installed",
                Status.OK,
                f"DKMS: not used, kernel {self.release} has its own "
                f"{self.driver.in_tree_module} ({own}); {package} skips it",
            )
            return True
        result = system.run("dkms", "status", "-m", module)
        if result is None:
            self._add(
                "dkms.registered",
                Status.FAIL,
                "DKMS is not installed",
                fix=f"sudo apt install dkms {package}",
            )
            return False
        states = self._dkms_states(result.stdout)
        lines = registrations(result.stdout, module)
        versions = sorted({line.version for line in lines if line.kernel})
        registered = versions or [
            name.split("-", 1)[1]
            for name in system.listdir("/usr/src")
            if name.startswith(f"{module}-")
        ]
        if not registered:
            self._add(
                "dkms.registered",
                Status.FAIL,
                f"DKMS: the {module} driver is not registered",
                fix=f"sudo apt install ./{package}_<version>_all.deb",
            )
            return False
        packaged = report_foreign(system, self.driver, result.stdout, registered, self.report)
        version = packaged[-1] if packaged else registered[-1]
        conf = system.read(f"/usr/src/{module}-{version}/dkms.conf") or ""
        if conf and not re.search(r'^AUTOINSTALL="?yes"?', conf, re.MULTILINE):
            self._add(
                "dkms.autoinstall",
                Status.WARN,
                f"DKMS: {module}/{version} is not rebuilt on kernel upgrades (no AUTOINSTALL)",
                f"This dkms.conf is not {package}'s.",
                fix=f"sudo apt install ./{package}_<version>_all.deb",
            )
        release = self.release
        state = next(
            (line.state for line in lines if line.kernel == release and line.version == version),
            "absent",
        )
        if state != "installed":
            error = self._first_error(version, release)
            self._add(
                "dkms.installed",
                Status.FAIL,
                f"DKMS: {module}/{version} is {state} for the running kernel {release}",
                f"first error of the build: {error}" if error else "",
                fix=f"sudo dkms install {module}/{version} -k {release}",
            )
            return False
        missing = [
            kernel
            for kernel in system.listdir("/lib/modules")
            if system.exists(f"/lib/modules/{kernel}/build")
            and kernel != release
            and states.get(kernel, ("", ""))[1] != "installed"
        ]
        if missing:
            self._add(
                "dkms.all-kernels",
                Status.WARN,
                f"DKMS: {module}/{version} not installed for {', '.join(missing)}",
                "After booting those kernels the NPU would be missing.",
                fix=f"sudo dkms autoinstall -k {missing[0]}",
            )
        self._add("dkms.installed", Status.OK, f"DKMS: {module}/{version} installed for {release}")
        self.report.facts["dkms_version"] = version
        return True

    # -- Secure Boot ------------------------------------------------------------------------

    def check_secure_boot(self) -> None:
        system = self.system
        result = system.run("mokutil", "--sb-state")
        if result is None:
            skip(self.report, "secureboot", "secureboot", "Secure Boot", "mokutil is not installed")
            return
        if "enabled" not in result.stdout.lower():
            self._add("secureboot", Status.OK, "Secure Boot: off")
            return
        if self.in_tree():
            self._add("secureboot", Status.OK, "Secure Boot: on; the kernel's own driver is signed")
            return
        if not system.exists(DKMS_KEY):
            self._add(
                "secureboot",
                Status.WARN,
                "Secure Boot: on, and DKMS has no signing key yet",
                fix="sudo dkms autoinstall   # creates and uses the key",
            )
            return
        test = system.run("mokutil", "--test-key", DKMS_KEY)
        if test is not None and "is already enrolled" in (test.stdout + test.stderr):
            self._add("secureboot", Status.OK, "Secure Boot: on, the DKMS signing key is enrolled")
            return
        self._add(
            "secureboot",
            Status.FAIL,
            "Secure Boot: on, but the DKMS signing key is not enrolled: the kernel refuses "
            f"{self.driver.module}.ko",
            "Confirm the enrolment at the next boot.",
            fix=f"sudo mokutil --import {DKMS_KEY}",
        )

    # -- the module modprobe would load, loaded, bound --------------------------------------

    def check_module(self) -> bool:
        system, release = self.system, self.release
        own = self.in_tree()
        # The kernel's own copy may have another name (CIX's tree builds armchina_npu).
        module = self.driver.in_tree_module if own else self.driver.module
        result = system.run("modinfo", "-F", "filename", module)
        if result is None:
            skip(self.report, "module.file", "module", "Module", "modinfo (kmod) is not installed")
            return False
        lines = result.stdout.strip().splitlines() if result.ok else []
        path = lines[0] if lines else ""
        if path == "(builtin)":
            self._add("module.file", Status.OK, f"Module: {module} is built into the kernel")
            return True
        if not path:
            self._add(
                "module.file",
                Status.FAIL,
                f"Module: no {module}.ko for {release}",
                fix="sudo depmod -a",
            )
            return False
        vermagic = system.run("modinfo", "-F", "vermagic", module)
        built_for = vermagic.stdout.split()[0] if vermagic and vermagic.stdout.split() else "?"
        expected = f"/lib/modules/{release}/" + ("kernel/" if own else "updates/dkms/")
        if not path.startswith(expected) or built_for != release:
            whose = "the kernel's own module" if own else "the DKMS build for this kernel"
            self._add(
                "module.file",
                Status.FAIL,
                f"Module: modprobe would load {path} (built for {built_for}), not {whose}",
                "A stale or in-tree copy shadows the DKMS module." if not own else "",
                fix=f"sudo rm {path} && sudo depmod -a"
                if "/updates/dkms/" not in path
                else f"sudo dkms install {module}/<version> -k {release} --force",
            )
            return False
        self._add("module.file", Status.OK, f"Module: {path}")
        refusals = blacklistings(system, module)
        loaded = system.exists(f"/sys/module/{module}")
        if refusals:
            first = refusals[0]
            places = "; ".join(f"{b.where} ({b.text})" for b in refusals)
            self._add(
                "module.blacklist",
                Status.WARN if loaded else Status.FAIL,
                f"Module: {module} is blacklisted in {first.where} ({first.text})"
                + (": loaded by hand now, it will not load at the next boot" if loaded else ""),
                f"Every place that keeps it from loading: {places}. Some distributions "
                f"blacklist {module} on purpose (Armbian does one such driver on its images, after "
                "kernel panics and lost HDMI on some of its kernels); lift it where this driver "
                "package supports the kernel.",
                fix=(
                    f"remove {first.text} from the kernel command line (the boot loader's "
                    "configuration: GRUB_CMDLINE_LINUX in /etc/default/grub then "
                    "'sudo update-grub'; Armbian: extraargs in /boot/armbianEnv.txt)"
                    if first.on_command_line
                    else "sudo npuctl provision --only lift-blacklist"
                ),
            )
            if not loaded:
                return False
        if self.check_trial(loaded):
            return False
        if not loaded:
            self._add(
                "module.loaded",
                Status.FAIL,
                f"Module: {module} is not loaded",
                fix=f"sudo modprobe {module}",
            )
            return False
        return True

    # -- the guarded first load (module-trial, npuctl.trials) ---------------------------------

    def check_trial(self, loaded: bool) -> bool:
        """Whether the running kernel's build is held (and not loaded): the finding says why,
        since when, what the trial's boot logged, and the command that releases it."""
        system, module, release = self.system, self.driver.module, self.release
        found = trials.records(system, self.driver)
        held = [record for record in found if record.state == "held"]
        self.report.facts["held_builds"] = [record.as_dict() for record in held]
        version = trials.module_version(system, module, release)
        mine = next((r for r in held if (r.kernel, r.version) == (release, version)), None)
        self.report.facts["driver_held"] = mine is not None
        others = [record for record in held if record is not mine]
        if others:
            self._add(
                "module.held-elsewhere",
                Status.WARN,
                f"Module: {module} held for "
                + ", ".join(f"{r.version} on {r.kernel}" for r in others),
                "Booting that kernel leaves the NPU without its driver until it is released.",
                fix=f"sudo npuctl driver release {module} --kernel {others[0].kernel}",
            )
        if mine is None:
            return False
        release_fix = (
            f"sudo npuctl driver release {module} && sudo modprobe {module}   "
            "# one new trial; after a fix: a new package version, a firmware or kernel change"
        )
        if mine.by_hand:
            summary = (
                f"Module: {module} {version} for {release} is held by hand since "
                f"{mine.when('held')}: {mine.fields.get('note', '')}"
            )
            detail = "Held with 'npuctl driver hold': no boot loads it until it is released."
        else:
            summary = (
                f"Module: {module} {version} for {release} is held: its first load, a trial "
                f"started {mine.when('started')}, never finished"
            )
            detail = (
                "The machine crashed, hung or was reset while the driver probed; a later boot "
                "found the trial open and did not load this build again.\n"
                + self._trial_boot_log(mine.fields.get("boot", ""))
            )
        self._add(
            "module.held",
            Status.WARN if loaded else Status.FAIL,
            summary + (": loaded by hand now" if loaded else ""),
            detail,
            fix=release_fix if not mine.by_hand else f"sudo npuctl driver release {module}",
        )
        return not loaded

    def _trial_boot_log(self, boot: str) -> str:
        """The kernel log of the trial's boot, where the journal kept it."""
        if not self.system.exists("/var/log/journal"):
            return (
                "The journal is not persistent (no /var/log/journal), so the kernel log of the "
                "boot that failed is gone; 'sudo mkdir -p /var/log/journal' keeps the next one."
            )
        result = self.system.run("journalctl", "-k", "-b", boot, "--no-pager", "-q", "-o", "short")
        if result is None or not result.ok or not result.stdout.strip():
            return f"The journal has no kernel log of that boot ({boot or 'unknown'})."
        names = {self.driver.module, self.driver.platform_driver, *self.driver.acpi_ids}
        pattern = "|".join(
            [re.escape(name) for name in sorted(names)]
            + ["Unable to handle", "Internal error", "Kernel panic", "Call trace", "BUG:"]
        )
        lines = [line for line in result.stdout.splitlines() if re.search(pattern, line, re.I)]
        return (
            "The kernel log of that boot (journalctl -k -b "
            + boot
            + "):\n"
            + "\n".join(lines[-12:])
        )

    def trial_files(self) -> dict[str, str]:
        """For the support bundle: every trial record, and the whole kernel log of each
        boot whose trial never finished, where the journal kept it."""
        files: dict[str, str] = {}
        for record in trials.records(self.system, self.driver):
            files[f"trials/{record.path.rsplit('/', 1)[-1]}"] = self.system.read(record.path) or ""
            boot = record.fields.get("boot", "")
            if record.state == "held" and not record.by_hand and boot:
                log = self.system.run("journalctl", "-k", "-b", boot, "--no-pager", "-q")
                if log is not None and log.ok:
                    files[f"trials/kernel-log-of-boot-{boot}.txt"] = log.stdout
        return files

    def kernel_log(self) -> list[str]:
        """The driver's kernel log lines, when the log is readable."""
        result = self.system.run("dmesg")
        if result is None or not result.ok:
            return []
        names = {self.driver.module, self.driver.platform_driver, *self.driver.acpi_ids}
        pattern = "|".join(re.escape(name) for name in sorted(names))
        return [
            line for line in result.stdout.splitlines() if re.search(pattern, line, re.IGNORECASE)
        ]

    def check_bound(self) -> bool:
        name = self.driver.platform_driver
        self.bound = [
            entry
            for entry in self.system.listdir(f"/sys/bus/platform/drivers/{name}")
            if entry not in SYSFS_DRIVER_FILES
        ]
        log = self.kernel_log()
        if not self.bound:
            explained = self.explain_unbound(log) if self.explain_unbound else None
            detail, fix = explained or ("", None)
            self._add(
                "module.bound",
                Status.FAIL,
                f"Driver: {name} is loaded but not bound to the NPU",
                detail,
                fix,
            )
            return False
        probe = [line.split("] ", 1)[-1] for line in log]
        self._add(
            "module.bound",
            Status.OK,
            f"Driver: {name} bound to {', '.join(self.bound)}",
            "\n".join(probe[-4:]),
        )
        self._check_runtime_pm()
        return True

    def _check_runtime_pm(self) -> None:
        rules = self.driver.board_files_named("runtime-pm.rules")
        if not rules:
            return
        device = f"/sys/bus/platform/devices/{self.bound[0]}/power/control"
        if self.system.read(device) != "auto":
            return
        installed = self.system.exists(rules[0])
        self._add(
            "module.runtime-pm",
            Status.WARN,
            "Runtime power management may stall the NPU (power/control is 'auto')",
            f"{rules[0]} keeps it 'on' from the next bind."
            if installed
            else f"{rules[0]} of {self.driver.package} is missing.",
            fix=f"echo on | sudo tee {device}"
            if installed
            else f"sudo apt install --reinstall {self.driver.package}",
        )

    # -- the device node --------------------------------------------------------------------

    def check_device(self) -> bool:
        system, driver = self.system, self.driver
        paths = driver.device_paths(system)
        example = driver.device_example
        node = paths[0] if paths else example
        info = system.stat(node)
        if info is None:
            self._add(
                "device.node",
                Status.FAIL,
                f"{example} does not exist",
                fix=f"sudo modprobe {driver.module}",
            )
            return False
        if not stat.S_ISCHR(info.st_mode):
            self._add(
                "device.node",
                Status.FAIL,
                f"{node} is not a character device",
                fix=f"sudo rm {node} && sudo modprobe -r {driver.module} && "
                f"sudo modprobe {driver.module}",
            )
            return False
        mode = stat.S_IMODE(info.st_mode)
        group = system.group_name(info.st_gid)
        description = f"{node}: owner uid {info.st_uid}, group {group}, mode {mode:04o}"
        if mode & 0o002:
            self._add(
                "device.node",
                Status.FAIL,
                f"{description}: world-writable, any user can drive the NPU",
                f"A rule giving MODE=0666 overrides {driver.package}'s (group {driver.group}, "
                f"{driver.mode}).",
                fix="remove that rule from /etc/udev/rules.d, then sudo udevadm trigger "
                f"--action=add --subsystem-match={driver.device_subsystem}",
            )
            return False
        rules = driver.board_files_named(f"60-{driver.package}.rules")
        legacy = tuple(path.replace("/usr/lib/", "/lib/", 1) for path in rules)
        if rules and not any(system.exists(path) for path in rules + legacy):
            self._add(
                "device.udev",
                Status.WARN,
                f"No udev rule for {node}: access falls back to root only",
                f"{rules[0]} of {driver.package} is missing.",
                fix=f"sudo apt install --reinstall {driver.package}",
            )
        identity = system.identity
        if not system.may_open(info):
            self._add(
                "device.access",
                Status.FAIL,
                f"{description}: user {identity.name} cannot open it",
                "Membership takes effect at the next login.",
                fix=f"sudo usermod -aG {group} {identity.name}",
            )
            return False
        self._add("device.node", Status.OK, f"{description}; {identity.name} may open it")
        return True

    def _add(
        self,
        finding_id: str,
        status: Status,
        summary: str,
        detail: str = "",
        fix: str | None = None,
    ) -> None:
        self.report.add(Finding(finding_id, finding_id.split(".")[0], status, summary, detail, fix))
