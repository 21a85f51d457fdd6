"""ACPI boots of an NPU driver in QEMU: UEFI firmware, acpi=force, and an SSDT describing the
NPU, completely or with one part missing. The tables and what each boot's kernel log must show
are the driver's own (lab.acpi in dkms/<package>.yaml); the lab renders, compiles and boots
them, and checks what every such boot must do: the device appears, the driver probes it and
does not stay bound to what it cannot drive, and the module unloads cleanly."""

from __future__ import annotations

import tempfile
from pathlib import Path

import jinja2

from pipeline.config import AcpiVariant
from pipeline.tools import run

from .qemu import BootResult


def render(table: str, variant: AcpiVariant, package: str) -> str:
    template = jinja2.Template(table, undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    header = (
        f"/* {package}: {variant.title}. Rendered by the kernel lab from dkms/{package}.yaml */\n"
    )
    return header + template.render(**variant.values)


def compile_table(table: str, variant: AcpiVariant, package: str, directory: Path) -> Path:
    """The variant's SSDT, compiled with iasl."""
    source = directory / f"npu-{variant.name}.asl"
    source.write_text(render(table, variant, package), encoding="utf-8")
    result = run(
        ["iasl", "-p", source.with_suffix(""), source], check=False, failure=f"iasl {source.name}"
    )
    table = source.with_suffix(".aml")
    if result.returncode != 0 or not table.exists():
        raise RuntimeError(f"iasl failed for {source.name}: {result.stdout[-400:]}")
    return table


def problems(variant: AcpiVariant, result: BootResult) -> list[str]:
    """What is not as the variant expects; empty when the boot went as it must."""
    found = result.lifecycle_problems()
    device, driver = f"{result.driver.acpi_id}:00", result.driver.platform_driver
    if not result.marker(f"acpi device {device} present"):
        found.append(f"the ACPI device {device} did not appear")
    if f"{driver} {device}" not in result.dmesg:
        found.append(f"the {driver} driver did not probe the ACPI device")
    if variant.expect not in result.dmesg:
        found.append(f"the kernel log lacks '{variant.expect}'")
    if result.marker(f"bound {device}"):
        found.append("the driver stayed bound to a device it cannot drive")
    return found


def probe_lines(result: BootResult) -> list[str]:
    """The driver's own kernel log lines, for the report."""
    return [
        line.strip()
        for line in result.dmesg.splitlines()
        if result.driver.platform_driver in line or result.driver.module in line.lower()
    ]


def scratch_directory() -> tempfile.TemporaryDirectory[str]:
    return tempfile.TemporaryDirectory(prefix="lab-acpi-")
