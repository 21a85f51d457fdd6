"""Samples to a Qdrant server with the official client (optional: npuctl[qdrant]). The
collection is created with the vectors' size and cosine distance; point ids are derived
from host and sample, so a retried write never makes a duplicate. A failed write leaves
the samples undelivered in the local store; they go with the next write, also after a
restart. ``file:///path`` or ``:memory:`` use the client's local mode (tests, one board)."""

from __future__ import annotations

import logging
import uuid
from typing import Any

from ..errors import ExitCode, NpuctlError
from .store import Stored

log = logging.getLogger("npuctl.watch")
_NAMESPACE = uuid.UUID("6f0c3a3e-2f1d-4e4b-9a55-7d3f6f2f8a10")


class QdrantSink:
    def __init__(self, url: str, collection: str) -> None:
        try:
            from qdrant_client import QdrantClient
        except ImportError:
            raise NpuctlError(
                "--qdrant needs the qdrant-client package: pip install 'npuctl[qdrant]'",
                ExitCode.USAGE,
            ) from None
        self.url = url
        self.collection = collection
        if url == ":memory:":
            self.client: Any = QdrantClient(location=":memory:")
        elif url.startswith("file://"):
            self.client = QdrantClient(path=url.removeprefix("file://"))
        else:
            self.client = QdrantClient(url=url, timeout=5)
        self._ready = False
        self._failing = False

    def deliver(self, samples: list[Stored]) -> list[int]:
        """The ids of the samples written; none when the server is away."""
        if not samples:
            return []
        try:
            self._ensure_collection(len(samples[0].vector))
            self.client.upsert(self.collection, points=[_point(sample) for sample in samples])
        except NpuctlError:
            raise
        except Exception as error:  # the server is away or refuses: keep the samples
            if not self._failing:
                log.warning("Qdrant at %s: %s; keeping samples locally", self.url, error)
            self._failing = True
            return []
        if self._failing:
            log.info("Qdrant at %s is back: delivered %d samples", self.url, len(samples))
        self._failing = False
        return [sample.id for sample in samples]

    def _ensure_collection(self, dimensions: int) -> None:
        if self._ready:
            return
        from qdrant_client.models import Distance, VectorParams

        if not self.client.collection_exists(self.collection):
            self.client.create_collection(
                self.collection,
                vectors_config=VectorParams(size=dimensions, distance=Distance.COSINE),
            )
        else:
            vectors = self.client.get_collection(self.collection).config.params.vectors
            size = getattr(vectors, "size", None)
            if size is not None and size != dimensions:
                raise NpuctlError(
                    f"the Qdrant collection {self.collection} holds {size}-d vectors, these "
                    f"are {dimensions}-d: choose another --qdrant-collection",
                    ExitCode.USAGE,
                )
        self._ready = True

    def close(self) -> None:
        self.client.close()


def _point(sample: Stored) -> Any:
    from qdrant_client.models import PointStruct

    return PointStruct(
        id=str(uuid.uuid5(_NAMESPACE, f"{sample.host}/{sample.time!r}/{sample.id}")),
        vector=sample.vector.tolist(),
        payload={
            "host": sample.host,
            "time": sample.time,
            "text": sample.text,
            "metrics": sample.metrics,
            "score": sample.score,
            "anomaly": sample.anomaly,
            "reason": sample.reason,
        },
    )
