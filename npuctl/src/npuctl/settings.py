"""The options every command shares (models folder, image limit, platform and its options):
here, not in the CLI, so that the platforms and the server use them without importing the
command line."""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from .models.manifest import Manifest


class Settings:
    """The global options. Platform runtimes keep what they build here (``cache``), so one
    command builds each at most once."""

    def __init__(
        self,
        models_dir: Path | None,
        max_image_pixels: int,
        platform: str | None,
        options: dict[str, object],
    ) -> None:
        self.models_dir_option = models_dir
        self.max_image_pixels = max_image_pixels
        self.platform = platform
        self.options = options
        self.cache: dict[str, object] = {}

    @cached_property
    def models_dir(self) -> Path:
        from .models.store import default_models_dir

        return self.models_dir_option or default_models_dir()

    @cached_property
    def manifest(self) -> Manifest:
        from .models.manifest import load_manifest

        return load_manifest()


pass_settings = click.make_pass_decorator(Settings)
