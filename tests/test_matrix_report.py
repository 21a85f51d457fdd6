"""The kernel matrix's report says what was proven, and no more."""

from kernel_lab.matrix import SCHEMA_VERSION, format_table, untested_range
from pipeline.config import package_names


def report(*kernels: str) -> dict:
    return {
        "seconds": 1.0,
        "columns": ["build"],
        "suites": [{"suite": "sid", "seconds": 1.0, "dkms": "3.2.2", "error": "", "log": "x"}],
        "rows": [
            {
                "suite": "sid",
                "kernel": kernel,
                "role": "installed",
                "package": "aipu-dkms",
                "ok": True,
                "cells": {"build": {"status": "ok", "seconds": 1.0, "detail": ""}},
            }
            for kernel in kernels
        ],
    }


def test_kernels_newer_than_tested_max_are_named(config):
    assert config.kernel_tested_max == "7.3"
    notes = untested_range(report("6.12.117+deb13-arm64", "7.3.4+deb13-arm64", "7.4.1+deb14-arm64"))
    assert notes == [
        "  7.4.1+deb14-arm64 is newer than aipu-dkms's kernel.tested_max (7.3) in "
        "dkms/aipu-dkms.yaml: raise it once this matrix passes"
    ]
    assert "7.4.1+deb14-arm64 is newer than aipu-dkms's kernel.tested_max" in format_table(
        report("7.4.1+deb14-arm64")
    )


def test_no_note_within_the_tested_range():
    assert untested_range(report("6.1.0-56-arm64", "7.3~rc7-arm64")) == []


def test_a_skipped_suite_and_an_unknown_kernel_are_said_and_fail_the_report():
    from kernel_lab.matrix import report_ok

    skipped = report("7.2.13+deb14-arm64")
    skipped["suites"].append(
        {
            "suite": "experimental",
            "seconds": 1.0,
            "dkms": "3.2.2",
            "error": "",
            "skipped": "its arm64 headers (7.2-1) are not newer than sid's (7.2.13-1)",
            "log": "x",
        }
    )
    assert report_ok(skipped)
    assert "experimental: not tested, its arm64 headers" in format_table(skipped)
    skipped["untested_kernels"] = ["linux-headers-9.9-arm64"]
    assert not report_ok(skipped)
    assert "linux-headers-9.9-arm64: no suite of this run carries it" in format_table(skipped)


def test_flavour_and_abi_of_every_debian_naming():
    from kernel_lab.kernels import abi, flavour

    cases = {
        "6.1.0-56-cloud-arm64": ("6.1.0-56", "cloud-arm64"),
        "6.12.117+deb13-arm64-16k": ("6.12.117+deb13", "arm64-16k"),
        "7.2.13+deb14-rt-arm64": ("7.2.13+deb14", "rt-arm64"),
        "7.3-arm64": ("7.3", "arm64"),
    }
    for release, expected in cases.items():
        assert (abi(release), flavour(release)) == expected


def test_kernels_must_be_headers_package_names(tmp_path):
    from kernel_lab.__main__ import main

    code = main(
        [
            "matrix",
            "--dist", str(tmp_path), "--next-dist", str(tmp_path), "--next-suffix", "lab1",
            "--src-dir", str(tmp_path), "--workdir", str(tmp_path), "--json", "r.json",
            "--kernels", "7.3.4+deb13-arm64",
        ]
    )  # fmt: skip
    assert code == 2


def test_missing_build_output_is_one_line(tmp_path, capsys):
    from kernel_lab.__main__ import main

    code = main(
        [
            "matrix", "--packages", "aipu-dkms,rocket-dkms",
            "--dist", str(tmp_path), "--next-dist", str(tmp_path), "--next-suffix", "lab1",
            "--src-dir", str(tmp_path), "--workdir", str(tmp_path), "--json", "r.json",
        ]
    )  # fmt: skip
    assert code == 2
    assert "missing: run 'make check-kernels'" in capsys.readouterr().err


def test_an_excluded_kernel_is_a_clean_row():
    excluded = report("7.2.13+deb14-arm64")
    excluded["rows"][0]["package"] = "rocket-dkms"
    excluded["rows"][0]["cells"]["build"] = {
        "status": "excluded",
        "seconds": 1.0,
        "detail": "skipped, as the gate says: CONFIG_DRM_ACCEL is off",
    }
    excluded["rows"][0]["ok"] = True
    table = format_table(excluded)
    assert "rocket-dkms" in table and "excl 1s" in table
    assert "notes:" not in table


def test_acpi_boots_in_the_oldest_and_the_newest_sure_suite():
    from kernel_lab.matrix import with_acpi_at_the_ends
    from kernel_lab.suites import PLANS

    every = [PLANS[name] for name in ("bookworm", "trixie", "trixie-backports", "sid")]
    every.append(PLANS["experimental"])  # runs only when newer than sid: not a sure end
    chosen = {plan.suite.name for plan in with_acpi_at_the_ends(every) if plan.acpi}
    assert chosen == {"bookworm", "sid"}
    (alone,) = with_acpi_at_the_ends([PLANS["trixie"]])
    assert alone.acpi


def test_warnings_are_read_from_dkms_build_log():
    from kernel_lab.scenarios import build_diagnostics

    clean = (
        "DKMS (dkms-3.2.2) make.log for aipu/5.11.0 for kernel 7.3.4+deb13-rt-arm64 (aarch64)\n"
        "  CC [M]  /var/lib/dkms/aipu/5.11.0/build/armchina-npu/aipu.o\n"
        "  MODPOST Module.symvers\n  LD [M]  aipu.ko\n"
    )
    assert build_diagnostics(clean) == {"warnings": "0"}
    warned = clean + (
        "aipu_job.c:42:9: warning: unused variable 'x' [-Wunused-variable]\n"
        "WARNING: modpost: missing MODULE_DESCRIPTION() in aipu.o\n"
    )
    facts = build_diagnostics(warned)
    assert facts["warnings"] == "2"
    assert "unused variable" in facts["first_warning"]


def test_the_results_page_is_generated_from_the_json_report(tmp_path):
    import json
    import subprocess
    import sys

    source = tmp_path / "kernel-matrix.json"
    document = {
        **report("7.3.4+deb13-arm64"),
        "schema": SCHEMA_VERSION,
        "generated": "2026-11-23T00:00:00+00:00",
        "packages": {"aipu-dkms": {"version": "5.11.0-1", "next_version": "x"}},
    }
    source.write_text(json.dumps(document))
    output = tmp_path / "docs" / "kernel-matrix-results.md"
    command = [sys.executable, "-m", "kernel_lab.tables", str(source), str(output)]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    page = output.read_text()
    assert "Generated by `make matrix-tables`" in page and "every row passed" in page
    assert "\n".join(line.rstrip() for line in format_table(document).splitlines()) in page

    missing = [sys.executable, "-m", "kernel_lab.tables", str(tmp_path / "none.json"), "x.md"]
    result = subprocess.run(missing, capture_output=True, text=True, check=False)
    assert result.returncode == 2
    assert result.stderr.strip().endswith("run 'make check-kernels' first")


def test_an_alternative_driver_line_gets_a_chroot_of_its_own():
    from types import SimpleNamespace

    from kernel_lab.matrix import coinstallable_groups

    builds = [SimpleNamespace(name=name) for name in package_names()]
    groups = coinstallable_groups(builds)  # type: ignore[arg-type]
    assert groups[0][0] == "" and "aipu-dkms" in [b.name for b in groups[0][1]]
    alone = {label: [b.name for b in group] for label, group in groups[1:]}
    # aipu-compass-dkms replaces aipu-dkms: in one chroot, one of them would not be tested.
    assert alone == {"aipu-compass-dkms": ["aipu-compass-dkms"]}
