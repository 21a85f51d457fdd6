"""The container image's HEALTHCHECK: `python3 -m npuctl.serve.healthcheck [URL]` asks the
server's /health and exits 0 (healthy) or 1 (unhealthy, with one line saying why), as Docker
and podman read a health command. The URL defaults to NPUCTL_HEALTH_URL, then the port npuctl
serve listens on by default."""

from __future__ import annotations

import http.client
import os
import sys
from urllib.parse import urlsplit

from ..defaults import DEFAULT_SERVE_PORT

DEFAULT_URL = f"http://127.0.0.1:{DEFAULT_SERVE_PORT}/health"
HEALTHY, UNHEALTHY = 0, 1


def check(url: str, timeout: float = 5.0) -> str | None:
    """None when the server answers 200; otherwise why not."""
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        return f"{url} is not an http:// URL"
    connection = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=timeout)
    try:
        connection.request("GET", parts.path or "/health")
        status = connection.getresponse().status
    except (OSError, http.client.HTTPException) as error:
        return f"{url}: {error}"
    finally:
        connection.close()
    return None if status == 200 else f"{url} answered {status}"


def main(argv: list[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else argv
    url = arguments[0] if arguments else os.environ.get("NPUCTL_HEALTH_URL", DEFAULT_URL)
    problem = check(url)
    if problem is not None:
        print(f"unhealthy: {problem}")
        return UNHEALTHY
    return HEALTHY


if __name__ == "__main__":
    sys.exit(main())
