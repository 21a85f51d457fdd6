"""HTTP over a unix socket (npuctl serve listens on one), with the standard library client."""

from __future__ import annotations

import http.client
import socket
from pathlib import Path


class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: Path, timeout: float = 30) -> None:
        super().__init__("localhost", timeout=timeout)
        self.socket_path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(str(self.socket_path))
