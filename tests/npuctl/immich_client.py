"""Immich's client logic (immich_client.mjs, run by Node) against a running server."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).with_name("immich_client.mjs")
MODEL = "ViT-B-32__openai"


def immich_client(urls: list[str], photo: Path, model: str = MODEL, mode: str = "") -> dict:
    """What Immich's server saw: health per URL, the photo's and a text's vectors, the face
    request's failures, and the photo's vector once more; with ``mode`` "startup", the check
    and then both requests at once, with the wall clock (ms) when each was sent and answered."""
    node = shutil.which("node") or shutil.which("nodejs")
    if node is None:
        pytest.skip("Node.js runs Immich's client logic: run 'make deps' (apt install nodejs)")
    result = subprocess.run(
        [node, str(SCRIPT), ",".join(urls), str(photo), model, *([mode] if mode else [])],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)
