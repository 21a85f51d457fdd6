"""The kernel matrix's report says what was proven, and no more."""

from kernel_lab.matrix import format_table, untested_range


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
        "  7.4.1+deb14-arm64 is newer than kernel.tested_max (7.3) in aipu.yaml: "
        "raise it once this matrix passes"
    ]
    assert "7.4.1+deb14-arm64 is newer than kernel.tested_max" in format_table(
        report("7.4.1+deb14-arm64")
    )


def test_no_note_within_the_tested_range():
    assert untested_range(report("6.1.0-56-arm64", "7.3~rc7-arm64")) == []
