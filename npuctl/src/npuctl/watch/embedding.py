"""Texts to vectors: through a running 'npuctl serve' (it owns the NPU; the agent must not
open it a second time), else in this process through the platform's Embedder."""

from __future__ import annotations

import base64
import http.client
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol
from urllib.parse import urlsplit

import numpy as np

from ..errors import ExitCode, NpuctlError, NpuError
from ..unix_http import UnixHTTPConnection

if TYPE_CHECKING:
    from ..settings import Settings


class Embedding(Protocol):
    where: str

    def embed(self, text: str) -> np.ndarray: ...

    def close(self) -> None: ...


class ServerEmbedding:
    def __init__(self, address: str, timeout: float = 60) -> None:
        self.where = address
        self._connect: Callable[[], http.client.HTTPConnection]
        if address.startswith("unix:"):
            self._connect = lambda: UnixHTTPConnection(Path(address[5:]), timeout)
        else:
            parts = urlsplit(address)
            if parts.scheme != "http" or not parts.hostname:
                raise NpuctlError(
                    f"--server {address}: give http://HOST:PORT or unix:/path/to/serve.sock",
                    ExitCode.USAGE,
                )
            host, port = parts.hostname, parts.port or 80
            self._connect = lambda: http.client.HTTPConnection(host, port, timeout=timeout)
        self._connection: http.client.HTTPConnection | None = None

    def embed(self, text: str) -> np.ndarray:
        body = json.dumps({"input": text, "encoding_format": "base64", "truncate": True})
        for attempt in (1, 2):  # a keep-alive connection the server closed: once more
            connection = self._connection or self._connect()
            try:
                connection.request("POST", "/v1/embeddings", body.encode())
                response = connection.getresponse()
                payload = response.read()
                self._connection = connection
                break
            except (OSError, http.client.HTTPException) as error:
                connection.close()
                self._connection = None
                if attempt == 2:
                    raise NpuError(f"npuctl serve at {self.where}: {error}") from None
        if response.status != 200:
            try:
                message = json.loads(payload)["error"]["message"]
            except (ValueError, KeyError, TypeError):
                message = payload[:200].decode(errors="replace")
            raise NpuError(f"npuctl serve at {self.where} answered {response.status}: {message}")
        encoded = json.loads(payload)["data"][0]["embedding"]
        return np.frombuffer(base64.b64decode(encoded), dtype="<f4")

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()


def serving(address: str) -> bool:
    """Whether a server answers /health there."""
    try:
        probe = ServerEmbedding(address, timeout=2)
        connection = probe._connect()
        connection.request("GET", "/health")
        ok = connection.getresponse().status == 200
        connection.close()
        return ok
    except (OSError, http.client.HTTPException, NpuctlError):
        return False


class LocalEmbedding:
    """The platform's Embedder in this process (no other NPU user may run meanwhile)."""

    def __init__(self, settings: Settings) -> None:
        from ..families import embedding_platform

        platform = embedding_platform(settings.platform)
        self.embedder = platform.open_embedder(settings)
        self.embedder.start()
        self.where = f"{platform.name} NPU, in this process"

    def embed(self, text: str) -> np.ndarray:
        from ..embedder import NpuFailure, Rejected

        try:
            return self.embedder.embed(self.embedder.prepare_text(text, True))
        except Rejected as error:
            raise NpuctlError(f"the text cannot be embedded: {error}", ExitCode.INPUT) from None
        except NpuFailure as failure:
            raise NpuError(str(failure)) from None

    def close(self) -> None:
        self.embedder.stop()
