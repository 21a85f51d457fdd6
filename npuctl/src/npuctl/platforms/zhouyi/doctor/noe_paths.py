"""The other ways to use the NOE stack than npuctl's own binding: CIX's ONNX Runtime build with
the Zhouyi execution provider, and CIX's libnoe Python wheel. Both are wheels for Python
3.11-3.12 only (under /usr/share/cix/pypi on CIX's images); the doctor says whether this
Python can use them, and what to do instead. Information and warnings, never failures:
npuctl itself needs neither."""

from __future__ import annotations

import re
import sys

from npuctl.child import run_module
from npuctl.doctor.findings import Finding, Report, Status
from npuctl.system import System

WHEEL_DIR = "/usr/share/cix/pypi"
SUPPORTED = ((3, 11), (3, 12))
PROVIDER = "ZhouyiExecutionProvider"
PROBE = "npuctl.platforms.zhouyi.doctor.noe_paths"


def _python() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"


def _wheel(system: System, name: str) -> str | None:
    wheels = [p for p in system.glob(f"{WHEEL_DIR}/*.whl") if re.search(name, p.lower())]
    return wheels[-1] if wheels else None


def _python_fits() -> bool:
    return SUPPORTED[0] <= sys.version_info[:2] <= SUPPORTED[1]


def umd_package_version(system: System) -> str | None:
    """The installed cix-noe-umd package's version, if any."""
    result = system.run("dpkg-query", "-W", "-f=${Version}", "cix-noe-umd")
    return result.stdout.strip() if result and result.ok and result.stdout.strip() else None


def _major_minor(version: str) -> tuple[str, ...]:
    return tuple(re.findall(r"\d+", version)[:2])


def check_noe_paths(system: System, report: Report, timeout: float) -> None:
    driver = report.facts.get("dkms_version")
    against = f" (driver {driver})" if driver else ""
    result = run_module(PROBE, [], timeout)
    answer = result.answer or {}
    ort, libnoe = answer.get("onnxruntime"), answer.get("libnoe")
    wheel_ort = _wheel(system, r"onnxruntime")
    if ort and PROVIDER in ort.get("providers", []):
        report.add(
            Finding(
                "noe.onnxruntime",
                "noe",
                Status.OK,
                f"ONNX Runtime {ort['version']} with {PROVIDER}{against}",
            )
        )
    elif ort:
        report.add(
            Finding(
                "noe.onnxruntime",
                "noe",
                Status.WARN,
                f"ONNX Runtime {ort['version']} has no {PROVIDER}: models run on the CPU",
                "This is a build without CIX's provider (PyPI's).",
                fix=f"pip install {wheel_ort}"
                if wheel_ort and _python_fits()
                else "use CIX's onnxruntime wheel (Python 3.11-3.12) or npuctl's .cix models",
            )
        )
    elif wheel_ort:
        fits = _python_fits()
        report.add(
            Finding(
                "noe.onnxruntime",
                "noe",
                Status.INFO if fits else Status.WARN,
                f"CIX's ONNX Runtime ({wheel_ort.rsplit('/', 1)[-1]}) is not installed "
                f"for Python {_python()}" + ("" if fits else ": its wheel needs Python 3.11-3.12"),
                fix=f"python3 -m pip install {wheel_ort}"
                if fits
                else "run it from a Python 3.12 environment (e.g. uv venv -p 3.12), or use "
                "npuctl's .cix models",
            )
        )
    if libnoe:
        umd = umd_package_version(system)
        mismatch = umd is not None and _major_minor(umd) != _major_minor(libnoe["version"])
        report.add(
            Finding(
                "noe.wheel",
                "noe",
                Status.WARN if mismatch else Status.INFO,
                f"CIX's libnoe wheel {libnoe['version']} is installed{against}"
                + (
                    f", but the user-mode driver (cix-noe-umd) is {umd}: they may not agree"
                    if mismatch
                    else "; npuctl uses its own binding"
                ),
                fix="install the libnoe wheel of the same release as cix-noe-umd"
                if mismatch
                else None,
            )
        )
    elif _wheel(system, r"libnoe") and not _python_fits():
        report.add(
            Finding(
                "noe.wheel",
                "noe",
                Status.INFO,
                f"CIX's libnoe wheel needs Python 3.11-3.12, this is {_python()}: npuctl's own "
                "binding works here",
                fix="npuctl run ... (or a Python 3.12 environment for the wheel)",
            )
        )


def main() -> int:
    """The child's answer: what this Python can import, as JSON on the last line."""
    import importlib.metadata
    import json

    answer: dict[str, object] = {}
    try:
        import onnxruntime

        answer["onnxruntime"] = {
            "version": getattr(onnxruntime, "__version__", "?"),
            "providers": list(onnxruntime.get_available_providers()),
        }
    except Exception:  # absent or broken: the wheel check says more
        answer["onnxruntime"] = None
    try:
        import libnoe  # noqa: F401

        answer["libnoe"] = {"version": importlib.metadata.version("libnoe")}
    except Exception:
        answer["libnoe"] = None
    sys.stdout.write(json.dumps(answer) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
