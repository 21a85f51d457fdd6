"""Each NPU family's adapter to npuctl serve (its models as the server serves them, its NPU
runtime for the owner threads), shipped with the server in npuctl-serve: the adapter of a
family whose Platform ``serves`` is the module of its name here, and only the server imports
it. Each one's ``ADAPTER`` is a ``ServingAdapter``, type-checked in make lint."""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

    from ...models.manifest import FrigateFacts
    from ...platform import Platform
    from ...settings import Settings
    from ..models import ServedModel, Serving

# An uploaded model file, proven, registered with the runtimes: as served, and as Frigate
# uses it.
Upload = Callable[["Settings", "Serving", str, "Path"], tuple["ServedModel", "FrigateFacts"]]


class ServingAdapter(ABC):
    @abstractmethod
    def open_serving(
        self, settings: Settings, wanted: tuple[str, ...] | None, workers: int
    ) -> Serving:
        """The family's models as the server serves them, with ``workers`` NPU owners."""

    def upload(
        self, settings: Settings, serving: Serving, name: str, path: Path
    ) -> tuple[ServedModel, FrigateFacts]:
        """A detector file a client uploaded (Frigate's model_data): proven in a child
        process first (ModelError when it fails or is no detector this family serves), then
        registered with every runtime of ``serving``, each loading it on its owner thread."""
        raise NotImplementedError


class OpenServing(ServingAdapter):
    """A family's adapter made of functions, checked against the methods' signatures."""

    def __init__(
        self,
        open_serving: Callable[[Settings, tuple[str, ...] | None, int], Serving],
        upload: Upload | None = None,
    ) -> None:
        self._open = open_serving
        self._upload = upload

    def open_serving(
        self, settings: Settings, wanted: tuple[str, ...] | None, workers: int
    ) -> Serving:
        return self._open(settings, wanted, workers)

    def upload(
        self, settings: Settings, serving: Serving, name: str, path: Path
    ) -> tuple[ServedModel, FrigateFacts]:
        if self._upload is None:
            raise NotImplementedError
        return self._upload(settings, serving, name, path)


def adapter(platform: Platform) -> ServingAdapter:
    found: ServingAdapter = importlib.import_module(f"{__name__}.{platform.name}").ADAPTER
    return found
