"""A healthy Orange Pi 6 Plus as a directory tree, for doctor's scenario tests: the files
doctor reads and small scripts standing in for dkms, modinfo, mokutil and dmesg. Each
scenario breaks one thing."""

from __future__ import annotations

import os
from pathlib import Path

from .image_inodes import char_device, forget, real_nodes

RELEASE = "6.12.117+deb13-arm64"
VERSION = "5.11.0+git20251022.66bfa0e"
RENDER_GID = 109
USER = "1000:1000,109:opi"  # uid:gids:name of a user in the render group


class BoardImage:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.write("proc/sys/kernel/arch", "aarch64")
        self.write("proc/sys/kernel/osrelease", RELEASE)
        self.write("sys/class/dmi/id/product_name", "Orange Pi 6 Plus")
        self.write("sys/bus/acpi/devices/CIXH4000:00/status", "15")
        (root / f"lib/modules/{RELEASE}/build").mkdir(parents=True)
        self.write(f"lib/modules/{RELEASE}/updates/dkms/aipu.ko", "module")
        self.write(
            f"usr/src/aipu-{VERSION}/dkms.conf",
            "# dkms.conf for aipu, generated from dkms/aipu-dkms.yaml by tools/pipeline;\n"
            'PACKAGE_NAME="aipu"\nAUTOINSTALL="yes"\n',
        )
        (root / "sys/module/aipu").mkdir(parents=True)
        (root / "sys/bus/platform/drivers/armchina/CIXH4000:00").mkdir(parents=True)
        self.write("sys/bus/platform/devices/CIXH4000:00/power/control", "on")
        self.write("etc/group", f"root:x:0:\nrender:x:{RENDER_GID}:opi\n")
        self.write("usr/lib/udev/rules.d/60-aipu-dkms.rules", 'KERNEL=="aipu", MODE="0660"\n')
        self.write("usr/lib/udev/rules.d/61-aipu-dkms-runtime-pm.rules", 'ATTR{power/control}="on"')
        self.device(0o660)
        self.dkms_status(f"aipu/{VERSION}, {RELEASE}, aarch64: installed")
        self.modinfo(f"/lib/modules/{RELEASE}/updates/dkms/aipu.ko", RELEASE)
        self.dmesg(
            "[    3.4] armchina CIXH4000:00: sky1_npu_probe: NPU core num is 3\n"
            "[    3.5] armchina CIXH4000:00: AIPU KMD (v5.11.0) probe start..."
        )
        self.secure_boot(enabled=False, enrolled=False)

    def write(self, relative: str, text: str) -> Path:
        path = self.root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + ("" if text.endswith("\n") else "\n"), encoding="utf-8")
        return path

    def remove(self, relative: str) -> None:
        forget(self.root, relative)
        path = self.root / relative
        if path.is_dir() and not path.is_symlink():
            import shutil

            shutil.rmtree(path)
        else:
            path.unlink()

    def device(self, mode: int, *, character: bool = True, gid: int = RENDER_GID) -> Path:
        if character:
            return char_device(self.root, "dev/aipu", mode, gid, 10, 123)
        forget(self.root, "dev/aipu")
        path = self.root / "dev/aipu"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")  # a plain file where the node should be
        if real_nodes():
            os.chown(path, 0, gid)
        path.chmod(mode)
        return path

    def command(self, name: str, body: str) -> None:
        path = self.write(f"usr/bin/{name}", f"#!/bin/sh\n{body}\n")
        path.chmod(0o755)

    def data(self, name: str, text: str) -> None:
        self.write(f"fixture/{name}", text)

    def dkms_status(self, text: str) -> None:
        self.data("dkms-status", text)
        self.command(
            "dkms",
            'if [ "$1" = "--version" ]; then echo "dkms-3.2.2"; exit 0; fi\n'
            'cat "$NPUCTL_ROOT/fixture/dkms-status"',
        )

    def modinfo(self, filename: str, built_for: str) -> None:
        self.data("modinfo-filename", filename)
        self.data("modinfo-vermagic", f"{built_for} SMP mod_unload modversions aarch64")
        self.command(
            "modinfo",
            'case "$2" in filename) cat "$NPUCTL_ROOT/fixture/modinfo-'
            'filename";; vermagic) cat "$NPUCTL_ROOT/fixture/modinfo-vermagic";;'
            f" version) echo {VERSION};; esac",
        )

    def dmesg(self, text: str) -> None:
        self.data("dmesg", text)
        self.command("dmesg", 'cat "$NPUCTL_ROOT/fixture/dmesg"')

    def secure_boot(self, *, enabled: bool, enrolled: bool) -> None:
        self.data("sb-state", "SecureBoot enabled" if enabled else "SecureBoot disabled")
        self.data(
            "test-key",
            "/var/lib/dkms/mok.pub is already enrolled"
            if enrolled
            else "/var/lib/dkms/mok.pub is not enrolled",
        )
        self.write("var/lib/dkms/mok.pub", "certificate")
        self.command(
            "mokutil",
            'case "$1" in --sb-state) cat "$NPUCTL_ROOT/fixture/sb-state";;'
            ' --test-key) cat "$NPUCTL_ROOT/fixture/test-key";; esac',
        )
