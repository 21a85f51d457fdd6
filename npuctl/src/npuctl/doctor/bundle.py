"""npuctl doctor --bundle: one support tarball with what a helper needs and nothing private
(the user's name and home directory are replaced; no host name, no environment)."""

from __future__ import annotations

import io
import json
import os
import tarfile
import tempfile
import time
from pathlib import Path

from ..system import System
from .findings import Report


def _redact(text: str, system: System) -> str:
    for secret, placeholder in ((str(Path.home()), "~"), (system.identity.name, "<user>")):
        if secret and len(secret) > 2:
            text = text.replace(secret, placeholder)
    return text


def write_bundle(
    target: Path,
    report: Report,
    system: System,
    version: str,
    module: str,
    kernel_log: list[str],
    driver_files: dict[str, str] | None = None,
) -> None:
    """The report, versions, the kernel log lines of the driver, DKMS's state and build logs
    of ``module``, and ``driver_files`` (name in the bundle -> text: the trial records)."""
    files: dict[str, str] = {
        "doctor.json": json.dumps(report.as_dict(version), indent=2),
        "kernel-log.txt": "\n".join(kernel_log) + "\n",
        "versions.txt": "\n".join(
            [
                f"npuctl {version}",
                f"kernel {system.kernel_release()}",
                f"machine {system.machine()}",
                system.read("/etc/os-release") or "",
                (system.run("dkms", "--version") or _Missing()).stdout.strip(),
            ]
        )
        + "\n",
    }
    if module:  # no NPU family found: no driver to report on
        status = system.run("dkms", "status", "-m", module)
        files["dkms-status.txt"] = status.stdout if status else "dkms is not installed\n"
        for log in system.glob(f"/var/lib/dkms/{module}/*/build/make.log") + system.glob(
            f"/var/lib/dkms/{module}/*/*/*/log/make.log"
        ):
            files["make-logs/" + log.strip("/").replace("/", "_")] = system.read(log) or ""
    files.update(driver_files or {})
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(
        prefix=".npuctl-bundle-", suffix=".tar.gz", dir=target.parent
    )
    try:
        with (
            os.fdopen(handle, "wb") as stream,
            tarfile.open(fileobj=stream, mode="w:gz") as archive,
        ):
            for name, text in sorted(files.items()):
                data = _redact(text, system).encode()
                info = tarfile.TarInfo(f"npuctl-doctor/{name}")
                info.size = len(data)
                info.mtime = int(time.time())
                info.mode = 0o644
                archive.addfile(info, io.BytesIO(data))
        Path(temporary).replace(target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


class _Missing:
    stdout = "dkms is not installed"
