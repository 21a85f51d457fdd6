"""Why fewer than three NPU cores probed: a rocket loaded after the kernel switched the unused
NPU supply off (vdd_npu_s0), or something else. A DKMS module loads from the root file system
unless the initramfs carries it, and the kernel's clean-up of unused regulators runs before
that; the fix is loading rocket from the initramfs (rocket-dkms's hook does, once the
initramfs is rebuilt), or, where it already is, keeping unused regulators on."""

from __future__ import annotations

import re
from dataclasses import dataclass

from npuctl.system import System

# "[   31.204512] vdd_npu_s0: disabling": the regulator core's late clean-up.
_DISABLED = re.compile(r"^\[\s*(\d+\.\d+)\]\s+(vdd_npu\S*): disabling", re.MULTILINE)
_ROCKET = re.compile(r"^\[\s*(\d+\.\d+)\]\s+rocket\b", re.MULTILINE)
HOOK = "/usr/share/initramfs-tools/hooks/rocket-dkms"
CMDLINE_FIX = (
    "add regulator_ignore_unused to the kernel command line (GRUB_CMDLINE_LINUX in "
    "/etc/default/grub, then sudo update-grub; on Armbian, extraargs in /boot/armbianEnv.txt), "
    "then reboot"
)


@dataclass(frozen=True)
class Diagnosis:
    late: bool  # the supply was switched off before (or without) rocket's probe
    detail: str
    fix: str


def in_initramfs(system: System, release: str) -> bool | None:
    """Whether the running kernel's initramfs carries rocket; None when it cannot be told."""
    image = f"/boot/initrd.img-{release}"
    if not system.exists(image):
        return None
    result = system.run("lsinitramfs", str(system.path(image)))
    if result is None or not result.ok:
        return None
    return re.search(r"/rocket\.ko(\.\w+)?$", result.stdout, re.MULTILINE) is not None


def diagnose(system: System, log: str, release: str) -> Diagnosis:
    disabled = _DISABLED.search(log)
    rocket = _ROCKET.search(log)
    if disabled is None:
        return Diagnosis(
            False,
            "The kernel log does not show the NPU supply switched off, so this is not a late "
            "load; the cores' own lines say why they did not probe.",
            "sudo dmesg | grep -i -e rocket -e rknn -e vdd_npu",
        )
    switched_off, supply = float(disabled[1]), disabled[2]
    when = (
        f"rocket's first line at {rocket[1]} s"
        if rocket
        else "rocket had not logged anything by then"
    )
    if rocket and float(rocket[1]) < switched_off:
        return Diagnosis(
            False,
            f"{supply} was switched off at {switched_off} s, after rocket probed "
            f"({when}): not a late load.",
            "sudo dmesg | grep -i -e rocket -e vdd_npu",
        )
    detail = (
        f"Late load: the kernel switched the unused {supply} off at {switched_off} s, "
        f"{when}. rocket must load from the initramfs, before that clean-up."
    )
    carried = in_initramfs(system, release)
    if carried:
        return Diagnosis(
            True,
            detail + " It is in the initramfs already, yet late: keep unused regulators on.",
            CMDLINE_FIX,
        )
    if system.exists(HOOK):
        fix = f"sudo update-initramfs -u -k {release} && sudo reboot   # rocket-dkms's hook"
    else:
        fix = (
            "echo rocket | sudo tee -a /etc/initramfs-tools/modules && "
            f"sudo update-initramfs -u -k {release} && sudo reboot"
        )
    return Diagnosis(True, detail + " The initramfs of this kernel lacks it.", fix)
