"""ACPI boots of the NPU driver in QEMU: UEFI firmware, acpi=force, and an SSDT describing
the CIXH4000 device, completely or with one part missing (acpi/npu.asl.j2)."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import jinja2

from pipeline.tools import run

from .qemu import BootResult

TEMPLATE = Path(__file__).resolve().parent / "acpi" / "npu.asl.j2"
UNUSED_MMIO = "0x09200000"  # nothing of QEMU's virt machine is there: must never be read
READABLE_MMIO = "0x04000000"  # QEMU's second flash bank: reads back, is no NPU
INCOMPLETE = "firmware description incomplete"


@dataclass(frozen=True)
class Variant:
    name: str
    title: str
    memory: str | None = UNUSED_MMIO
    irq: int | None = 144
    core_mask: int | None = 1
    power_domains: int = 1
    expect: str = INCOMPLETE  # what the kernel log must say

    def asl(self) -> str:
        template = jinja2.Template(
            TEMPLATE.read_text(encoding="utf-8"),
            undefined=jinja2.StrictUndefined,
            keep_trailing_newline=True,
        )
        return template.render(
            title=self.title,
            memory=self.memory,
            irq=self.irq,
            core_mask=self.core_mask,
            power_domains=self.power_domains,
        )


VARIANTS = (
    Variant("no-power-domains", "no CRE* power-domain devices", power_domains=0),
    Variant("no-irq", "no interrupt", irq=None),
    Variant("no-memory", "no register region", memory=None),
    Variant(
        "no-core-mask",
        "no core_mask (all three cores) and one power domain",
        core_mask=None,
        power_domains=1,
    ),
    Variant(
        "mask-exceeds-domains", "core_mask 7 and two power domains", core_mask=7, power_domains=2
    ),
    Variant(
        "full",
        "complete, registers on a readable flash bank",
        memory=READABLE_MMIO,
        core_mask=7,
        power_domains=3,
        expect="unidentified hardware version number",
    ),
)


def compile_table(variant: Variant, directory: Path) -> Path:
    """The variant's SSDT, compiled with iasl."""
    source = directory / f"npu-{variant.name}.asl"
    source.write_text(variant.asl(), encoding="utf-8")
    result = run(
        ["iasl", "-p", source.with_suffix(""), source], check=False, failure=f"iasl {source.name}"
    )
    table = source.with_suffix(".aml")
    if result.returncode != 0 or not table.exists():
        raise RuntimeError(f"iasl failed for {source.name}: {result.stdout[-400:]}")
    return table


def problems(variant: Variant, result: BootResult) -> list[str]:
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
