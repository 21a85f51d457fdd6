"""A healthy Orange Pi 5 Plus (RK3588, trixie with the backports kernel, rocket-dkms, Mesa
Teflon from backports) as a directory tree, for the rocket doctor's scenario tests. Each
scenario breaks one thing."""

from __future__ import annotations

from pathlib import Path

from .board_image import RENDER_GID, BoardImage
from .image_inodes import char_device

RELEASE = "7.3.4+bpo-arm64"
VERSION = "7.2.8"
CORES = ("fdab0000", "fdac0000", "fdad0000")
DEVICE = "dev/accel/accel0"


class RocketBoard(BoardImage):
    """Shares BoardImage's helpers, not its (Zhouyi) contents."""

    def __init__(self, root: Path, delegate: Path) -> None:
        self.root = root
        self.write("proc/sys/kernel/arch", "aarch64")
        self.write("proc/sys/kernel/osrelease", RELEASE)
        self.write("proc/meminfo", "MemTotal:        3930000 kB\n")
        self.write("proc/cmdline", "root=/dev/mmcblk0p2 ro quiet")
        base = "sys/firmware/devicetree/base"
        self.write(f"{base}/model", "Xunlong Orange Pi 5 Plus\0")
        self.write(f"{base}/compatible", "xunlong,orangepi-5-plus\0rockchip,rk3588\0")
        for address in CORES:
            self.write(f"{base}/npu@{address}/compatible", "rockchip,rk3588-rknn-core\0")
            self.write(f"{base}/npu@{address}/status", "okay\0")
        self.write(
            f"boot/config-{RELEASE}",
            "CONFIG_ARM64=y\nCONFIG_DRM_ACCEL=y\nCONFIG_DRM_SCHED=m\n"
            "# CONFIG_DRM_ACCEL_ROCKET is not set\n",
        )
        (root / f"lib/modules/{RELEASE}/build").mkdir(parents=True)
        self.write(f"lib/modules/{RELEASE}/updates/dkms/rocket.ko.xz", "module")
        self.write(
            f"usr/src/rocket-{VERSION}/dkms.conf",
            "# dkms.conf for rocket, generated from dkms/rocket-dkms.yaml by tools/pipeline;\n"
            'PACKAGE_NAME="rocket"\nAUTOINSTALL="yes"\n',
        )
        (root / "sys/module/rocket").mkdir(parents=True)
        for address in CORES:
            (root / f"sys/bus/platform/drivers/rocket/{address}.npu").mkdir(parents=True)
        self.write("usr/lib/udev/rules.d/60-rocket-dkms.rules", 'SUBSYSTEM=="accel", MODE="0660"')
        self.write("usr/lib/modprobe.d/rocket-dkms-blacklist-rknpu.conf", "blacklist rknpu")
        self.dkms_status(f"rocket/{VERSION}, {RELEASE}, aarch64: installed")
        self.modinfo(f"/lib/modules/{RELEASE}/updates/dkms/rocket.ko.xz", RELEASE)
        self.secure_boot(enabled=False, enrolled=False)
        self.dmesg(
            "".join(
                f"[    4.{n}] rocket {a}.npu: Rockchip NPU core {n} version: 1179210309\n"
                for n, a in enumerate(CORES)
            )
        )
        self.write("etc/group", f"root:x:0:\nrender:x:{RENDER_GID}:opi\n")
        self.accel(0o660)
        teflon = root / "usr/lib/teflon/libteflon.so"
        teflon.parent.mkdir(parents=True, exist_ok=True)
        teflon.write_bytes(delegate.read_bytes())
        self.teflon_version("26.2.6-1")  # the wanted build (teflon.yaml)

    def accel(self, mode: int, *, gid: int = RENDER_GID) -> Path:
        return char_device(self.root, DEVICE, mode, gid, 261, 0)

    def teflon_version(self, version: str | None) -> None:
        self.data("teflon-version", version or "")
        self.command(
            "dpkg-query",
            'v=$(cat "$NPUCTL_ROOT/fixture/teflon-version"); [ -n "$v" ] || exit 1; printf %s "$v"',
        )

    def teflon_candidate(self, version: str | None) -> None:
        """What 'apt-cache policy' says apt would install (the board's sources and pins)."""
        self.data("teflon-candidate", version or "(none)")
        self.command(
            "apt-cache",
            'c=$(cat "$NPUCTL_ROOT/fixture/teflon-candidate")\n'
            'printf "mesa-teflon-delegate:\\n  Installed: x\\n  Candidate: %s\\n" "$c"\n'
            'printf "  Version table:\\n     %s 500\\n        500 http://deb.debian.org\\n" "$c"',
        )
