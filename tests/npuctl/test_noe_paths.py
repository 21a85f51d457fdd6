"""The doctor on the other NOE paths: CIX's ONNX Runtime with the Zhouyi execution provider
and CIX's libnoe wheel, as this Python sees them (stand-in packages on PYTHONPATH) and as the
image holds their wheels."""

import sys

from npuctl.doctor.findings import Report, Status
from npuctl.platforms.zhouyi.doctor import noe_paths
from npuctl.system import System

from .test_doctor import doctor, image  # noqa: F401  (the board image fixture)


def stand_in(tmp_path, name, body, version="1.0"):
    site = tmp_path / "site"
    (site / name).mkdir(parents=True, exist_ok=True)
    (site / name / "__init__.py").write_text(body)
    info = site / f"{name}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    return {"PYTHONPATH": str(site)}


def test_onnxruntime_with_the_zhouyi_provider(board, image, tmp_path):  # noqa: F811
    env = stand_in(
        tmp_path,
        "onnxruntime",
        "__version__ = '1.20.0'\ndef get_available_providers():\n"
        "    return ['ZhouyiExecutionProvider', 'CPUExecutionProvider']\n",
    )
    code, checks = doctor(board, image, "--quick", env=env)
    assert code == 0, checks
    assert checks["noe.onnxruntime"]["summary"].startswith(
        "ONNX Runtime 1.20.0 with ZhouyiExecutionProvider"
    )


def test_onnxruntime_without_the_provider_warns(board, image, tmp_path):  # noqa: F811
    env = stand_in(
        tmp_path,
        "onnxruntime",
        "__version__ = '1.22.1'\ndef get_available_providers():\n"
        "    return ['CPUExecutionProvider']\n",
    )
    code, checks = doctor(board, image, "--quick", env=env)
    assert code == 10
    assert "models run on the CPU" in checks["noe.onnxruntime"]["summary"]


def test_the_wheel_present_but_not_installed(board, image):  # noqa: F811
    image.write("usr/share/cix/pypi/onnxruntime_zhouyi-1.20.0-cp312-cp312-linux_aarch64.whl", "")
    _, checks = doctor(board, image, "--quick")
    finding = checks["noe.onnxruntime"]
    assert "is not installed for Python" in finding["summary"]
    fits = (3, 11) <= sys.version_info[:2] <= (3, 12)
    assert finding["status"] == ("info" if fits else "warning")


def test_the_libnoe_wheel_installed(board, image, tmp_path):  # noqa: F811
    env = stand_in(tmp_path, "libnoe", "", version="2.0.2")
    _, checks = doctor(board, image, "--quick", env=env)
    assert "libnoe wheel 2.0.2 is installed" in checks["noe.wheel"]["summary"]


def test_a_libnoe_wheel_of_another_release_than_the_umd(board, image, tmp_path):  # noqa: F811
    env = stand_in(tmp_path, "libnoe", "", version="1.4.0")
    image.data("umd-version", "2.0.2-1")
    image.command("dpkg-query", 'cat "$NPUCTL_ROOT/fixture/umd-version"')
    code, checks = doctor(board, image, "--quick", env=env)
    assert code == 10
    assert "cix-noe-umd) is 2.0.2-1: they may not agree" in checks["noe.wheel"]["summary"]


def test_on_python_3_13_the_wheels_are_out_of_reach(tmp_path, monkeypatch):
    root = tmp_path / "root"
    (root / "usr/share/cix/pypi").mkdir(parents=True)
    for wheel in (
        "onnxruntime_zhouyi-1.20.0-cp312-cp312-linux_aarch64.whl",
        "libnoe-2.0.2-cp312-cp312-linux_aarch64.whl",
    ):
        (root / "usr/share/cix/pypi" / wheel).write_text("")
    monkeypatch.setattr(noe_paths, "_python_fits", lambda: False)
    monkeypatch.setattr(noe_paths, "_python", lambda: "3.13")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "nothing"))
    report = Report()
    noe_paths.check_noe_paths(System(root), report, 60)
    found = {f.id: f for f in report.findings}
    assert found["noe.onnxruntime"].status == Status.WARN
    assert "needs Python 3.11-3.12" in found["noe.onnxruntime"].summary
    assert "npuctl's own binding works here" in found["noe.wheel"].summary
