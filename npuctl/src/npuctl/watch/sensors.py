"""What the agent measures: CPU, memory, load, disks (psutil) and every temperature sensor.

Temperatures are read from sysfs directly: psutil reads /sys/class/thermal only when no hwmon
temperature exists, so an NVMe drive's hwmon sensor would hide the SoC's thermal zones."""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil


@dataclass
class Sample:
    host: str
    time: float
    cpu: float  # percent, all cores
    ram: float  # percent used
    load: tuple[float, float, float]
    temperatures: dict[str, float] = field(default_factory=dict)  # name -> °C
    disks: dict[str, float] = field(default_factory=dict)  # mount point -> percent used

    def as_dict(self) -> dict[str, object]:
        return {
            "host": self.host,
            "time": self.time,
            "cpu": self.cpu,
            "ram": self.ram,
            "load": list(self.load),
            "temperatures": self.temperatures,
            "disks": self.disks,
        }


class Sensors:
    def __init__(self, root: Path = Path("/")) -> None:
        self.root = root
        self.host = socket.gethostname()
        psutil.cpu_percent(interval=None)  # the first call only starts the measurement

    def sample(self) -> Sample:
        return Sample(
            self.host,
            time.time(),
            float(psutil.cpu_percent(interval=None)),
            float(psutil.virtual_memory().percent),
            tuple(round(value, 2) for value in os.getloadavg()),  # type: ignore[arg-type]
            temperatures(self.root),
            disks(),
        )


def temperatures(root: Path) -> dict[str, float]:
    found: dict[str, float] = {}
    for zone in sorted((root / "sys/class/thermal").glob("thermal_zone*")):
        name = _read(zone / "type") or zone.name
        value = _millidegrees(zone / "temp")
        if value is not None:
            found[_unique(found, name)] = value
    for hwmon in sorted((root / "sys/class/hwmon").glob("hwmon*")):
        chip = _read(hwmon / "name") or hwmon.name
        for sensor in sorted(hwmon.glob("temp*_input")):
            value = _millidegrees(sensor)
            if value is None:
                continue
            label = _read(sensor.with_name(sensor.name.replace("_input", "_label")))
            found[_unique(found, f"{chip} {label}" if label else chip)] = value
    return found


def disks() -> dict[str, float]:
    used: dict[str, float] = {}
    devices: set[str] = set()
    for partition in psutil.disk_partitions(all=False):
        # One line per file system: bind mounts and snaps repeat a device already listed.
        if partition.device in devices or partition.mountpoint.startswith(("/snap/", "/boot/")):
            continue
        devices.add(partition.device)
        try:
            used[partition.mountpoint] = float(psutil.disk_usage(partition.mountpoint).percent)
        except OSError:
            continue
    return used


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip() or None
    except OSError:
        return None


def _millidegrees(path: Path) -> float | None:
    text = _read(path)
    try:
        return round(int(text) / 1000, 1) if text is not None else None
    except ValueError:
        return None


def _unique(found: dict[str, float], name: str) -> str:
    if name not in found:
        return name
    number = 2
    while f"{name} {number}" in found:
        number += 1
    return f"{name} {number}"
