"""The records of a driver package's guarded first load, as the doctor and 'npuctl driver'
read them. Every driver package ships the guard (/usr/libexec/<package>/module-trial, which
modprobe runs for each load of the module); it keeps one file per build of the module
(kernel release x module version) in /var/lib/<package>/trials/<release>@<version>.<state>,
lines of key=value, where the state is open (a trial under way, or one an earlier boot never
finished), held (not loaded: reason=trial, such a trial found by a later boot, or
reason=user), passed (the driver bound and its node appeared) or survived (the load
returned without the device). The guard writes them; npuctl only reads them, and asks the
guard to hold or release."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime

from .drivers import Driver
from .system import System

RECORDS = "/var/lib/{package}/trials"
GUARD = "/usr/libexec/{package}/module-trial"
STATES = ("open", "held", "passed", "survived")
_NAME = re.compile(r"^(?P<kernel>[^@/]+)@(?P<version>[^@/]+)\.(?P<state>[a-z]+)$")


@dataclass(frozen=True)
class TrialRecord:
    kernel: str
    version: str
    state: str
    fields: dict[str, str]
    path: str

    @property
    def by_hand(self) -> bool:
        return self.state == "held" and self.fields.get("reason") == "user"

    def when(self, key: str) -> str:
        """A time field as people read it (UTC), or '' when the record lacks it."""
        value = self.fields.get(key, "")
        if not value.isdigit():
            return ""
        return datetime.fromtimestamp(int(value), UTC).strftime("%Y-%m-%d %H:%M:%S UTC")

    def as_dict(self) -> dict[str, str]:
        return {
            "kernel": self.kernel,
            "version": self.version,
            "state": self.state,
            **{
                key: value for key, value in self.fields.items() if key not in ("kernel", "version")
            },
        }


def guard_path(driver: Driver) -> str:
    return GUARD.format(package=driver.package)


def records(system: System, driver: Driver) -> list[TrialRecord]:
    folder = RECORDS.format(package=driver.package)
    found = []
    for name in system.listdir(folder):
        match = _NAME.match(name)
        if not match or match["state"] not in STATES:
            continue
        path = f"{folder}/{name}"
        text = system.read(path) or ""
        fields = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
        found.append(TrialRecord(match["kernel"], match["version"], match["state"], fields, path))
    return found


def module_version(system: System, module: str, release: str) -> str:
    """The version of the build of ``module`` modprobe would load for ``release``, named as
    the guard names it."""
    result = system.run("modinfo", "-F", "version", "-k", release, module)
    lines = result.stdout.strip().splitlines() if result is not None and result.ok else []
    return lines[0].strip() if lines and lines[0].strip() else "unversioned"
