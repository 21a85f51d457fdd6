"""A sample as the text the NPU embeds, from a Jinja template the user may replace.

Subword text encoders barely tell "cpu 2.4%" from "cpu 95%", so the default template says the
level in words as well ("cpu 95% very high"). User templates run in Jinja's sandbox."""

from __future__ import annotations

from pathlib import Path

from jinja2 import StrictUndefined, TemplateError
from jinja2.sandbox import SandboxedEnvironment

from ..errors import InputError
from .sensors import Sample

DEFAULT_TEMPLATE = """\
host {{ host }}: cpu {{ cpu | round(1) }}% {{ cpu | level }}, memory {{ ram | round(1) }}% \
{{ ram | level }}, load {{ load[0] }} {{ (load[0] / cores * 100) | level }}
{%- for name, value in temperatures.items() %}, {{ name }} {{ value }}°C \
{{ value | temperature_level }}{% endfor %}
{%- for mount, used in disks.items() %}, disk {{ mount }} {{ used | round(1) }}% full \
{{ used | level }}{% endfor %}"""

_LEVELS = ((10, "idle"), (40, "low"), (70, "moderate"), (85, "high"), (95, "very high"))
_TEMPERATURES = ((45, "cool"), (65, "warm"), (80, "hot"), (90, "very hot"))


def level(percent: float) -> str:
    return next((word for bound, word in _LEVELS if percent < bound), "critical")


def temperature_level(celsius: float) -> str:
    return next((word for bound, word in _TEMPERATURES if celsius < bound), "critical")


class Renderer:
    def __init__(self, template: Path | None, cores: int) -> None:
        environment = SandboxedEnvironment(undefined=StrictUndefined, autoescape=False)
        environment.filters["level"] = level
        environment.filters["temperature_level"] = temperature_level
        self.cores = cores
        self.origin = str(template) if template else "the default template"
        try:
            source = template.read_text(encoding="utf-8") if template else DEFAULT_TEMPLATE
            self.template = environment.from_string(source)
        except (OSError, UnicodeDecodeError) as error:
            raise InputError(f"cannot read the template {template}: {error}") from None
        except TemplateError as error:
            raise InputError(f"{self.origin} is not a valid Jinja template: {error}") from None

    def render(self, sample: Sample) -> str:
        try:
            text = self.template.render(**sample.as_dict(), cores=self.cores)
        except TemplateError as error:
            raise InputError(
                f"{self.origin} fails on a sample: {error} (variables: host, time, cpu, ram, "
                "load, temperatures, disks, cores; filters: level, temperature_level)"
            ) from None
        except (TypeError, ValueError, ArithmeticError) as error:
            raise InputError(f"{self.origin} fails on a sample: {error}") from None
        if not text.strip():
            raise InputError(f"{self.origin} renders an empty text")
        return " ".join(text.split())
