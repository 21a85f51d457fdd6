"""Frigate's semantic-search client as Frigate runs it: its llama.cpp GenAI provider
(frigate/genai/plugins/llama_cpp.py) and its embedding adapter
(frigate/embeddings/genai_embedding.py), with the GenAI base class and helpers they import, at
the commit emulation/rk3588.yaml pins (frigate_genai), imported as they are. Only Frigate's
configuration (frigate.config, frigate.const) and the modules the package imports for its
description and review features (which the embedding path never calls) are stood in. The
client runs in a child process that takes one JSON command a line and answers one JSON line,
so that one client lives across a restart of the server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rocket_emu import sources
from rocket_emu.pins import load

PINNED = "frigate_genai"

# Frigate's configuration, as the provider reads it (frigate/config/camera/genai.py).
_CONFIG = """
from enum import Enum


class GenAIProviderEnum(str, Enum):
    openai = "openai"
    azure_openai = "azure_openai"
    gemini = "gemini"
    ollama = "ollama"
    llamacpp = "llamacpp"


class GenAIConfig:
    def __init__(self, **fields):
        self.provider = GenAIProviderEnum.llamacpp
        self.api_key = None
        self.base_url = None
        self.model = ""
        self.provider_options = {}
        self.roles = ["embeddings"]
        self.__dict__.update(fields)


class CameraConfig:
    pass
"""

# What frigate/genai/__init__.py imports for descriptions and reviews only.
_UNUSED = {
    "const.py": "CLIPS_DIR = '/media/frigate/clips'\n",
    "models.py": "class Event:\n    pass\n",
    "data_processing/__init__.py": "",
    "data_processing/post/__init__.py": "",
    "data_processing/post/types.py": "class ReviewMetadata:\n    pass\n",
    "genai/manager.py": "class GenAIClientManager:\n    pass\n",
    "genai/prompts.py": "".join(
        f"def {name}(*args, **kwargs):\n    raise NotImplementedError\n\n\n"
        for name in (
            "build_object_description_prompt",
            "build_review_description_prompt",
            "build_review_description_response_format",
            "build_review_summary_prompt",
        )
    ),
}

_DRIVER = """
import base64, json, logging, sys, time

records = []


class Keep(logging.Handler):
    def emit(self, record):
        records.append(record.getMessage())


logging.getLogger().addHandler(Keep())
logging.getLogger().setLevel(logging.DEBUG)

from frigate.config import GenAIConfig
from frigate.genai.plugins.llama_cpp import LlamaCppClient
from frigate.embeddings.genai_embedding import GenAIEmbedding

client = adapter = None
for line in sys.stdin:
    command = json.loads(line)
    records.clear()
    sent = time.time()
    answer = {}
    if command["op"] == "init":
        config = GenAIConfig(
            base_url=command["base_url"], model=command["model"], api_key=command.get("api_key")
        )
        client = LlamaCppClient(config, timeout=60)
        adapter = GenAIEmbedding(client)
        answer = {
            "provider": client.provider,
            "vision": client.supports_vision,
            "marker": client._media_marker,
        }
    elif command["op"] == "text":
        answer["vectors"] = [v.tolist() for v in adapter(command["texts"], "text")]
    elif command["op"] == "vision":
        images = [base64.b64decode(item) for item in command["images"]]
        answer["vectors"] = [v.tolist() for v in adapter(images, "vision")]
        answer["marker"] = client._media_marker
    answer.update(log=list(records), sent=sent, answered=time.time())
    print(json.dumps(answer), flush=True)
"""


def client_tree(target: Path) -> Path:
    """Frigate's pinned files at their paths, with the stand-ins; skips when not cached."""
    pins = load()
    cached = sources.frigate_cache(pins, PINNED)
    if not cached.is_dir():
        pytest.skip(
            "Frigate's GenAI client is not cached: run 'make fetch FRIGATE_GIT=<clone of "
            "blakeblackshear/frigate>' once"
        )
    for name in ("requests", "httpx", "pydantic"):
        pytest.importorskip(name, reason=f"Frigate's client imports {name}: run 'make deps'")
    for path in pins.data[PINNED]["files"]:
        placed = target / path
        placed.parent.mkdir(parents=True, exist_ok=True)
        placed.write_bytes((cached / Path(path).name).read_bytes())
    stand_ins = {"config.py": _CONFIG, **_UNUSED}
    for path, text in stand_ins.items():
        placed = target / "frigate" / path
        placed.parent.mkdir(parents=True, exist_ok=True)
        placed.write_text(text)
    for package in ("frigate", "frigate/genai/plugins", "frigate/embeddings"):
        (target / package / "__init__.py").touch()  # Frigate's would import all of it
    (target / "driver.py").write_text(_DRIVER)
    return target


class FrigateClient:
    """One of Frigate's llama.cpp clients in its own process."""

    def __init__(self, tree: Path) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(tree / "driver.py")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(tree)},
        )

    def send(self, **command: Any) -> dict:
        assert self.process.stdin and self.process.stdout
        self.process.stdin.write(json.dumps(command) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        assert line, f"Frigate's client ended (exit {self.process.wait(10)})"
        return json.loads(line)

    def close(self) -> None:
        if self.process.stdin:
            self.process.stdin.close()
        self.process.wait(30)
