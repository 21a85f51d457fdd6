"""The API key: read once at start from --api-key-file or systemd's credential, compared in
constant time with what each request carries (Authorization: Bearer, as OpenAI's and Triton's
clients send it, or DeepStack's form field api_key)."""

from __future__ import annotations

import hmac
import os
from collections.abc import Mapping
from pathlib import Path

from ..errors import ExitCode, NpuctlError

CREDENTIAL = "npuctl-serve-api-key"  # LoadCredential= name under systemd
MAX_KEY_BYTES = 4096


def load_key(path: Path | None) -> bytes | None:
    """The key from ``path``, else from $CREDENTIALS_DIRECTORY/npuctl-serve-api-key when
    systemd passed one, else None (no key)."""
    if path is None:
        directory = os.environ.get("CREDENTIALS_DIRECTORY")
        candidate = Path(directory) / CREDENTIAL if directory else None
        if candidate is None or not candidate.exists():
            return None
        path = candidate
    try:
        data = path.read_bytes()[: MAX_KEY_BYTES + 1]
    except OSError as error:
        raise NpuctlError(
            f"cannot read the API key {path}: {error.strerror or error}", ExitCode.USAGE
        ) from None
    key = data.strip()
    if not key or len(key) > MAX_KEY_BYTES or b"\n" in key or b"\0" in key:
        raise NpuctlError(
            f"{path} must hold one API key on one line (1 to {MAX_KEY_BYTES} bytes)",
            ExitCode.USAGE,
        )
    return key


def bearer(headers: Mapping[str, str]) -> bytes | None:
    scheme, _, token = headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip().encode("latin-1")


def matches(key: bytes, offered: bytes | None) -> bool:
    return offered is not None and hmac.compare_digest(key, offered)
