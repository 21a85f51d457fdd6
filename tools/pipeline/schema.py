"""The descriptions of this tree (dkms/, images/, emulation/) checked against their JSON Schema:
what is wrong with one, in one line naming the field and what is allowed there."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError, best_match


@functools.cache
def _validator(schema: Path) -> Draft202012Validator:
    return Draft202012Validator(json.loads(schema.read_text(encoding="utf-8")))


def problem(data: Any, schema: Path) -> str | None:
    """What is wrong with ``data`` ("field: what"), or None when the schema holds."""
    error = best_match(_validator(schema).iter_errors(data))
    return None if error is None else describe(error)


def describe(error: ValidationError) -> str:
    """'kernel.min: '6' is not MAJOR.MINOR', in the schema's own words where it has any."""
    field = ".".join(str(part) for part in error.absolute_path)
    within = f"{field}." if field else ""
    instance, expected = error.instance, error.validator_value
    if error.validator == "required" and isinstance(instance, dict):
        missing = next(name for name in expected if name not in instance)
        return f"{within}{missing}: missing: add it"
    if error.validator == "additionalProperties" and isinstance(instance, dict):
        known = sorted(error.schema.get("properties", {}))
        unknown = next(name for name in instance if name not in known)
        return f"{within}{unknown}: not a field here (known: {', '.join(known)})"
    field = field or "the top level"
    allowed = error.schema.get("description") if isinstance(error.schema, dict) else None
    if allowed and error.validator == "oneOf":
        return f"{field}: must be {allowed}"
    if allowed and error.validator in ("pattern", "type"):
        return f"{field}: {_shown(instance)} is not {allowed}"
    return f"{field}: {error.message[:200]}"


def _shown(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
