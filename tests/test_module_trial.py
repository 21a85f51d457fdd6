"""The guarded first load every driver package ships (provision/module-trial/): the guard
rendered from each package's description and run as modprobe runs it, over a root whose
kernel is played by stand-ins for modprobe and modinfo (a load that binds, fails,
leaves no device, or takes the machine down with it), and boots told apart by their boot id
as the kernel tells them."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from pipeline.config import load_package, package_names
from pipeline.render import render_file, template_context

PACKAGES = package_names()

# The kernel as the guard sees it. modprobe checks that the trial's record is on disk before
# it "inserts", then does what fake/behaviour says; "crash" ends the guard as a panic would
# (nothing after the insertion runs).
MODPROBE = r"""#!/bin/sh
set -eu
fake=$MODULE_TRIAL_ROOT/fake
echo "$*" >>"$fake/modprobe.calls"
ls "$MODULE_TRIAL_ROOT/var/lib/$PACKAGE/trials" >>"$fake/records-at-insertion" 2>/dev/null || true
case $(cat "$fake/behaviour") in
bind)
	drivers=$MODULE_TRIAL_ROOT/sys/bus/platform/drivers/$DRIVER
	mkdir -p "$drivers" "$MODULE_TRIAL_ROOT/sys/devices/npu0"
	ln -sfn "$MODULE_TRIAL_ROOT/sys/devices/npu0" "$drivers/npu0"
	mkdir -p "$(dirname "$MODULE_TRIAL_ROOT/dev/$NODE")"
	: >"$MODULE_TRIAL_ROOT/dev/$NODE"
	;;
fail) echo "modprobe: ERROR: could not insert module: No such device" >&2; exit 1 ;;
crash) kill -KILL "$PPID"; exit 1 ;;
esac
"""
MODINFO = '#!/bin/sh\ncat "$MODULE_TRIAL_ROOT/fake/version"\n'


@dataclass
class Machine:
    root: Path
    package: str
    module: str
    guard: Path
    shims: Path

    def boot(self, boot_id: str) -> None:
        (self.root / "proc/sys/kernel/random/boot_id").write_text(boot_id + "\n")
        for volatile in ("sys", "dev"):
            subprocess.run(["rm", "-rf", str(self.root / volatile)], check=True)
        (self.root / "dev").mkdir()
        (self.root / "dev/kmsg").write_text("")

    def set(self, **values: str) -> None:
        for name, value in values.items():
            (self.root / "fake" / name).write_text(value + "\n")
            if name == "release":
                (self.root / "proc/sys/kernel/osrelease").write_text(value + "\n")

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        driver = load_package(self.package)
        env = {
            **os.environ,
            "PATH": f"{self.shims}:{os.environ['PATH']}",
            "MODULE_TRIAL_ROOT": str(self.root),
            "PACKAGE": self.package,
            "DRIVER": driver.platform_driver,
            "NODE": driver.device["node"].replace("*", "0"),
        }
        return subprocess.run(
            ["sh", str(self.guard), *args], env=env, capture_output=True, text=True, timeout=60
        )

    def kmsg(self) -> list[str]:
        return (self.root / "dev/kmsg").read_text().splitlines()

    def records(self) -> list[str]:
        folder = self.root / f"var/lib/{self.package}/trials"
        return sorted(path.name for path in folder.iterdir()) if folder.is_dir() else []

    def calls(self) -> list[str]:
        calls = self.root / "fake/modprobe.calls"
        return calls.read_text().splitlines() if calls.exists() else []


@pytest.fixture(params=PACKAGES)
def machine(request, tmp_path) -> Machine:
    package = request.param
    config = load_package(package)
    (guard_file,) = [f for f in config.board_files if f.name == "module-trial"]
    root = tmp_path / "root"
    guard = root / guard_file.installed_path.lstrip("/")
    guard.parent.mkdir(parents=True)
    guard.write_text(render_file(guard_file.source, template_context(config)))
    shims = tmp_path / "shims"
    shims.mkdir()
    for name, text in (("modprobe", MODPROBE), ("modinfo", MODINFO)):
        (shims / name).write_text(text)
        (shims / name).chmod(0o755)
    (root / "fake").mkdir()
    (root / "proc/sys/kernel/random").mkdir(parents=True)
    found = Machine(root, package, config.module, guard, shims)
    found.set(release="6.12.57+deb13-arm64", version="1.0-1", behaviour="bind")
    found.boot("boot-1")
    return found


def test_first_load_is_a_trial_recorded_before_insertion_and_passes(machine):
    loaded = machine.run("load", "debug=1")
    assert loaded.returncode == 0, loaded.stderr
    assert machine.calls() == [f"--ignore-install {machine.module} debug=1"]
    # The record was on disk when the module went in.
    at_insertion = (machine.root / "fake/records-at-insertion").read_text().split()
    assert at_insertion == ["6.12.57+deb13-arm64@1.0-1.open"]
    assert machine.records() == ["6.12.57+deb13-arm64@1.0-1.passed"]
    assert any("passed" in line for line in machine.kmsg())
    # Later boots load it as any module: no record written, no line logged.
    machine.boot("boot-2")
    assert machine.run("load").returncode == 0
    assert (machine.root / "fake/records-at-insertion").read_text().split()[-1].endswith(".passed")
    assert machine.kmsg() == []


def test_a_crash_in_the_trial_holds_that_build_at_the_next_boot(machine):
    machine.set(behaviour="crash")
    assert machine.run("load").returncode != 0
    assert machine.records() == ["6.12.57+deb13-arm64@1.0-1.open"]
    machine.boot("boot-2")
    machine.set(behaviour="bind")
    calls = len(machine.calls())
    refused = machine.run("load")
    assert refused.returncode == 1
    assert len(machine.calls()) == calls, "a held build must not be inserted"
    assert machine.records() == ["6.12.57+deb13-arm64@1.0-1.held"]
    (line,) = machine.kmsg()
    assert line.startswith(f"<4>{machine.package}: {machine.module} 1.0-1 for 6.12.57")
    assert "never finished" in line and f"npuctl driver release {machine.module}" in line
    # modprobe by hand says the same, every time.
    again = machine.run("load")
    assert again.returncode == 1 and "is held" in again.stderr and "release" in again.stderr
    held = machine.root / f"var/lib/{machine.package}/trials/6.12.57+deb13-arm64@1.0-1.held"
    assert "reason=trial" in held.read_text() and "boot=boot-1" in held.read_text()


def test_a_new_version_or_kernel_gets_its_own_trial(machine):
    machine.set(behaviour="crash")
    machine.run("load")
    machine.boot("boot-2")
    machine.set(behaviour="bind")
    assert machine.run("load").returncode == 1
    machine.set(version="1.0-2")  # the fixed package
    assert machine.run("load").returncode == 0
    machine.set(release="7.2.13+deb14-arm64", version="1.0-1")  # another kernel, old build
    assert machine.run("load").returncode == 0
    assert machine.records() == [
        "6.12.57+deb13-arm64@1.0-1.held",
        "6.12.57+deb13-arm64@1.0-2.passed",
        "7.2.13+deb14-arm64@1.0-1.passed",
    ]


def test_release_gives_one_new_trial_and_hold_by_hand_refuses(machine):
    machine.set(behaviour="crash")
    machine.run("load")
    machine.boot("boot-2")
    machine.run("load")
    released = machine.run("release")
    assert released.returncode == 0 and "new trial" in released.stderr
    machine.set(behaviour="bind")
    assert machine.run("load").returncode == 0
    assert machine.records() == ["6.12.57+deb13-arm64@1.0-1.passed"]
    assert machine.run("verdict").returncode == 0
    # Held by hand (it breaks something else): a passed build is refused too, until released.
    assert machine.run("hold", "HDMI goes dark").returncode == 0
    refused = machine.run("load")
    assert refused.returncode == 1 and "held by hand: HDMI goes dark" in refused.stderr
    assert machine.run("verdict").returncode == 1
    assert machine.run("release").returncode == 0
    assert machine.run("load").returncode == 0


def test_a_load_that_fails_cleanly_is_not_held(machine):
    machine.set(behaviour="fail")
    assert machine.run("load").returncode == 1
    assert machine.records() == ["6.12.57+deb13-arm64@1.0-1.survived"]
    machine.boot("boot-2")
    machine.set(behaviour="bind")
    assert machine.run("load").returncode == 0
    assert machine.records() == ["6.12.57+deb13-arm64@1.0-1.passed"]


def test_no_trial_without_a_writable_record(machine):
    (machine.root / "var/lib").mkdir(parents=True)
    (machine.root / f"var/lib/{machine.package}").write_text("not a folder")
    refused = machine.run("load")
    assert refused.returncode == 1 and "not writable" in refused.stderr
    assert machine.calls() == []


def test_a_load_before_the_root_is_writable_is_deferred_then_retried_as_a_trial(machine):
    """udev's coldplug before systemd-remount-fs: the guard leaves a marker in /run (a tmpfs)
    and says so once; the deferred-load service's retry, once /var/lib is writable, makes the
    load that boot's trial, with the options modprobe was given."""
    (machine.root / "run/systemd/system").mkdir(parents=True)  # systemd is the init
    lib = machine.root / "var/lib"
    lib.mkdir(parents=True)
    (lib / machine.package).write_text("read-only yet")
    deferred = machine.root / f"run/{machine.package}/deferred"
    early = machine.run("load", "debug=1")
    assert early.returncode == 1
    assert machine.calls() == [], "no insertion without a trial record"
    (line,) = machine.kmsg()
    assert line.startswith(f"<4>{machine.package}: {machine.module} 1.0-1 for 6.12.57")
    assert "deferred" in line and f"{machine.package}-deferred-load.service" in line
    assert "kernel=6.12.57+deb13-arm64" in deferred.read_text()
    # systemd-remount-fs has run: the root is writable.
    (lib / machine.package).unlink()
    retried = machine.run("retry")
    assert retried.returncode == 0, retried.stderr
    assert machine.calls() == [f"--ignore-install {machine.module} debug=1"]
    at_insertion = (machine.root / "fake/records-at-insertion").read_text().split()
    assert at_insertion == ["6.12.57+deb13-arm64@1.0-1.open"]
    assert machine.records() == ["6.12.57+deb13-arm64@1.0-1.passed"]
    assert not deferred.exists()
    # Once only: a second retry (the service started by hand) loads nothing.
    again = machine.run("retry")
    assert again.returncode == 0 and "no load" in again.stderr
    assert len(machine.calls()) == 1


def test_a_root_that_stays_read_only_is_retried_once_and_not_loaded(machine):
    (machine.root / "run/systemd/system").mkdir(parents=True)
    lib = machine.root / "var/lib"
    lib.mkdir(parents=True)
    (lib / machine.package).write_text("read-only")
    assert machine.run("load").returncode == 1
    assert (machine.root / f"run/{machine.package}/deferred").exists()
    refused = machine.run("retry")
    assert refused.returncode == 1 and "not writable; not loaded" in refused.stderr
    assert machine.calls() == []
    # No new marker: the service is not started again and again.
    assert not (machine.root / f"run/{machine.package}/deferred").exists()


def test_without_systemd_a_load_before_the_root_is_writable_is_not_deferred(machine):
    """sysvinit: no unit would retry, so the guard leaves no marker and says what to run."""
    lib = machine.root / "var/lib"
    lib.mkdir(parents=True)
    (lib / machine.package).write_text("read-only yet")
    refused = machine.run("load")
    assert refused.returncode == 1 and machine.calls() == []
    (line,) = machine.kmsg()
    assert "not writable; not loaded" in line and f"'modprobe {machine.module}'" in line
    assert not (machine.root / f"run/{machine.package}").exists()


def test_a_trial_left_open_is_held_only_once_its_record_can_be_written(machine):
    (machine.root / "run/systemd/system").mkdir(parents=True)
    machine.set(behaviour="crash")
    machine.run("load")
    machine.boot("boot-2")
    lib = machine.root / f"var/lib/{machine.package}"
    lib.rename(machine.root / "var/lib/aside")
    lib.write_text("read-only yet")
    machine.set(behaviour="bind")
    calls = len(machine.calls())
    assert machine.run("load").returncode == 1
    assert len(machine.calls()) == calls, "an open trial of another boot is never loaded"
    lib.unlink()
    (machine.root / "var/lib/aside").rename(lib)
    held = machine.run("retry")
    assert held.returncode == 1 and "is held" in held.stderr
    assert len(machine.calls()) == calls
    assert machine.records() == ["6.12.57+deb13-arm64@1.0-1.held"]


def test_the_modprobe_line_sends_every_load_through_the_guard():
    for package in PACKAGES:
        config = load_package(package)
        (conf,) = [f for f in config.board_files if f.name == f"{package}-trial.conf"]
        assert conf.installed_path == f"/usr/lib/modprobe.d/{package}-trial.conf"
        text = render_file(conf.source, template_context(config))
        (line,) = [line for line in text.splitlines() if line.startswith("install ")]
        assert line.split()[1] == config.module
        assert f"/usr/libexec/{package}/module-trial load $CMDLINE_OPTS" in line


def test_the_deferred_load_units_are_rendered_for_each_package(tmp_path):
    from pipeline.config import DEBIAN_TEMPLATES
    from pipeline.render import render_tree

    for package in PACKAGES:
        config = load_package(package)
        render_tree(DEBIAN_TEMPLATES, tmp_path / package, template_context(config))
        stem = tmp_path / package / f"{package}.{package}-deferred-load"
        path_unit = Path(f"{stem}.path").read_text()
        service = Path(f"{stem}.service").read_text()
        assert f"PathExistsGlob=/run/{package}/deferred*" in path_unit
        assert "WantedBy=paths.target" in path_unit
        assert f"ExecStart=/usr/libexec/{package}/module-trial retry" in service
        assert f"ConditionPathExistsGlob=/run/{package}/deferred*" in service
        rules = (tmp_path / package / "rules").read_text()
        assert f"dh_installsystemd --name={package}-deferred-load" in rules


KMOD_MODPROBE = next(
    (path for path in ("/usr/sbin/modprobe", "/sbin/modprobe") if os.access(path, os.X_OK)), None
)


@pytest.mark.skipif(KMOD_MODPROBE is None, reason="kmod's modprobe is not installed")
def test_kmods_modprobe_runs_the_guard_and_says_a_build_is_held(machine, tmp_path):
    """The package's modprobe.d line as kmod reads it (the guard at its place in the root)."""
    config = load_package(machine.package)
    (conf,) = [f for f in config.board_files if f.name.endswith("-trial.conf")]
    text = render_file(conf.source, template_context(config)).replace(
        "/usr/libexec/", f"{machine.root}/usr/libexec/"
    )
    machine.guard.chmod(0o755)
    (tmp_path / "modprobe.d").mkdir()
    (tmp_path / "modprobe.d" / conf.name).write_text(text)
    modules = machine.root / "lib/modules/6.12.57+deb13-arm64"
    modules.mkdir(parents=True)
    (modules / "modules.dep").write_text("")
    kmod = [KMOD_MODPROBE, "-d", str(machine.root), "-S", "6.12.57+deb13-arm64"]
    kmod += ["-C", str(tmp_path / "modprobe.d"), config.module]
    env = {
        **os.environ,
        "PATH": f"{machine.shims}:{os.environ['PATH']}",
        "MODULE_TRIAL_ROOT": str(machine.root),
        "PACKAGE": machine.package,
        "DRIVER": config.platform_driver,
        "NODE": config.device["node"].replace("*", "0"),
    }
    machine.set(behaviour="crash")
    machine.run("load")
    machine.boot("boot-2")
    held = subprocess.run(kmod, env=env, capture_output=True, text=True, timeout=60)
    assert held.returncode != 0
    assert f"{config.module} 1.0-1 for 6.12.57+deb13-arm64 is held" in held.stderr
    assert f"npuctl driver release {config.module}" in held.stderr
    machine.run("release")
    machine.set(behaviour="bind")
    loaded = subprocess.run([*kmod, "debug=1"], env=env, capture_output=True, text=True)
    assert loaded.returncode == 0, loaded.stderr
    assert machine.calls()[-1] == f"--ignore-install {config.module} debug=1"
    assert machine.records() == ["6.12.57+deb13-arm64@1.0-1.passed"]


@pytest.mark.parametrize("package", PACKAGES)
def test_the_guard_is_shellcheck_clean(package, tmp_path):
    config = load_package(package)
    (guard,) = [f for f in config.board_files if f.name == "module-trial"]
    script = tmp_path / "module-trial"
    script.write_text(render_file(guard.source, template_context(config)))
    checked = subprocess.run(["shellcheck", str(script)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout
