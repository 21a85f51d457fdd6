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
    from ...platform import Platform
    from ...settings import Settings
    from ..models import Serving


class ServingAdapter(ABC):
    @abstractmethod
    def open_serving(
        self, settings: Settings, wanted: tuple[str, ...] | None, workers: int
    ) -> Serving:
        """The family's models as the server serves them, with ``workers`` NPU owners."""


class OpenServing(ServingAdapter):
    """A family's adapter that is one function, checked against open_serving's signature."""

    def __init__(
        self, open_serving: Callable[[Settings, tuple[str, ...] | None, int], Serving]
    ) -> None:
        self._open = open_serving

    def open_serving(
        self, settings: Settings, wanted: tuple[str, ...] | None, workers: int
    ) -> Serving:
        return self._open(settings, wanted, workers)


def adapter(platform: Platform) -> ServingAdapter:
    found: ServingAdapter = importlib.import_module(f"{__name__}.{platform.name}").ADAPTER
    return found
