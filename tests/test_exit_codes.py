"""The tools of tools/ share one set of exit codes, each with one meaning, and the table in
docs/development.md is that set."""

from __future__ import annotations

import re
from pathlib import Path

import oci_image.errors
import rocket_emu.errors
from pipeline.errors import ExitCode

DEVELOPMENT = Path(__file__).resolve().parents[1] / "docs/development.md"


def test_every_tool_exits_with_the_shared_codes() -> None:
    assert oci_image.errors.ExitCode is ExitCode
    assert rocket_emu.errors.ExitCode is ExitCode


def test_each_code_has_one_meaning_documented_once() -> None:
    text = DEVELOPMENT.read_text()
    section = text.split("## Exit codes of the tools", 1)[1].split("\n## ", 1)[0]
    documented = [int(code) for code in re.findall(r"^\| (\d+) \|", section, re.M)]
    assert documented == sorted({int(code) for code in ExitCode})
    # Aliases name a code twice, never give it a second meaning.
    assert ExitCode.VERIFY is ExitCode.INPUT
    assert ExitCode.UPSTREAM is ExitCode.ARCHIVE is ExitCode.UNREACHABLE
