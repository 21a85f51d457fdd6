"""What the doctor's checks are given: where the models are, the platform's own options, how
thorough and how patient to be. Below the family interface, which every family's checks
take it through."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..models.manifest import Manifest


@dataclass
class Options:
    models_dir: Path
    manifest: Manifest
    platform_options: dict[str, object] = field(default_factory=dict)  # npuctl --OPTION ...
    quick: bool = False
    timeout_s: float = 120.0  # per child process (a library, one model)
