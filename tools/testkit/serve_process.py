"""npuctl serve as users run it: a child process on a free port and a unix socket, ready when
it says so on stderr, stopped with SIGTERM."""

from __future__ import annotations

import http.client
import json
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

READY = re.compile(r"ready: (http://[^ ]+)")
LISTENING = re.compile(r"listening: (http://[^ ]+)")


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> dict:
        return json.loads(self.body)


@dataclass
class Server:
    process: subprocess.Popen
    url: str | None = None
    socket_path: Path | None = None
    lines: list[str] = field(default_factory=list)
    ended: threading.Event = field(default_factory=threading.Event)
    ready: threading.Event = field(default_factory=threading.Event)
    listening: threading.Event = field(default_factory=threading.Event)
    ready_at: float | None = None  # the wall clock when it said it was ready

    @property
    def port(self) -> int:
        assert self.url
        return int(self.url.rsplit(":", 1)[1])

    @property
    def stderr(self) -> str:
        return "".join(self.lines)

    def connection(self, timeout: float = 30) -> http.client.HTTPConnection:
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def request(
        self,
        method: str,
        path: str,
        body: object = None,
        connection: http.client.HTTPConnection | None = None,
        headers: dict[str, str] | None = None,
    ) -> Answer:
        own = connection is None
        connection = connection or self.connection()
        payload = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
        try:
            connection.request(method, path, body=payload, headers=headers or {})
            response = connection.getresponse()
            return Answer(response.status, dict(response.getheaders()), response.read())
        finally:
            if own:
                connection.close()

    def embed(self, document: dict, **kwargs: Any) -> Answer:
        return self.request("POST", "/v1/embeddings", document, **kwargs)

    def metric(self, name: str) -> float:
        text = self.request("GET", "/metrics").body.decode()
        for line in text.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[-1])
        raise AssertionError(f"no metric {name} in /metrics")

    def stop(self, timeout: float = 60) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(timeout)
        self.ended.wait(timeout)
        return code


def start(
    env: dict[str, str] | None,
    *args: str,
    socket_path: Path | None = None,
    wait: bool = True,
    npuctl: list[str] | None = None,
) -> Server:
    """``npuctl``: the command that runs npuctl (an installed one); the source tree's by
    default."""
    command = [*(npuctl or [sys.executable, "-m", "npuctl"]), "serve", "--port", "0"]
    command += ["--unix-socket", str(socket_path)] if socket_path else ["--no-unix-socket"]
    process = subprocess.Popen(
        [*command, *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    server = Server(process, socket_path=socket_path)

    def read() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            server.lines.append(line)
            if found := LISTENING.search(line):
                server.url = found.group(1)
                server.listening.set()
            if found := READY.search(line):
                server.ready_at = time.time()
                server.url = found.group(1)
                server.ready.set()
        server.ended.set()
        server.listening.set()  # never listening: the waiter sees the process end
        server.ready.set()

    threading.Thread(target=read, daemon=True).start()
    if wait:
        server.ready.wait(120)
        if server.ready_at is None:
            code = server.stop(10)
            raise AssertionError(f"npuctl serve did not start (exit {code}):\n{server.stderr}")
    return server
