"""Every bound of npuctl serve, declared once: its name, default, unit, range and what it
bounds. The command's options (flag, environment variable, help), the ``Limits`` the server
reads, docs/serving.md's table of limits and the OpenAPI document's bounds are all made from
these declarations."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import click

MiB = 1024 * 1024
DEFAULT_PARTIAL_FRAMES = 256 * MiB  # --max-partial-frames' most when derived
ENVIRONMENT_PREFIX = "NPUCTL_SERVE_"


@dataclass(frozen=True)
class Declaration:
    unit: str
    low: float
    high: float
    help: str
    aliases: tuple[str, ...] = ()  # older flags that still work
    # What the default is when it is derived at start instead of fixed (None: fixed).
    derived: str | None = None


def _limit(default: Any, unit: str, low: float, high: float, help: str, **more: Any) -> Any:
    return field(default=default, metadata={"limit": Declaration(unit, low, high, help, **more)})


@dataclass(frozen=True)
class Limits:
    """The server's bounds; each field is one option of 'npuctl serve'."""

    queue_size: int = _limit(
        256, "inputs", 1, 100_000,
        "Inputs that may wait for the NPU; more are answered 429 with Retry-After.",
    )  # fmt: skip
    max_inputs: int = _limit(
        64, "inputs", 1, 100_000,
        "Inputs in one embeddings request (OpenAI's input, llama.cpp's content).",
    )  # fmt: skip
    max_images: int = _limit(
        8, "images", 1, 1_000,
        "Images in one embeddings request (OpenAI's, llama.cpp's).",
    )  # fmt: skip
    max_body: int = _limit(
        2 * MiB, "bytes", 1024, 1 << 30, "Bytes in the body of a text request (embeddings)."
    )
    max_upload: int = _limit(
        24 * MiB, "bytes", 1024, 1 << 30,
        "Bytes in the body of an image or tensor request (vision, Immich, KServe v2, "
        "llama.cpp's /embeddings with its images in base64).",
    )  # fmt: skip
    max_form_parts: int = _limit(32, "parts", 1, 1_000, "Fields in one form.")
    max_model_upload: int = _limit(
        64 * MiB, "bytes", 1024, 1 << 32,
        "Bytes of a model file Frigate uploads (taken only with --zmq-uploads).",
    )  # fmt: skip
    max_uploads: int = _limit(
        4, "models", 0, 1_000,
        "Model files one address (an IPv6 /64) may upload with --zmq-uploads, each served to "
        "that address only; an upload that fails its proof is deleted.",
    )  # fmt: skip
    max_uploads_total: int = _limit(
        16, "models", 0, 10_000,
        "Model files the --zmq-uploads folder holds from every address together (so at most "
        "this many times --max-model-upload bytes); an earlier run's are removed at start.",
    )  # fmt: skip
    max_partial_frames: int = _limit(
        0, "bytes", 0, 1 << 40,
        "Bytes of the large ZeroMQ frames (Frigate's tensors, model files) being received at "
        "once, all connections together, never less than one of the largest; a new one that "
        "does not fit closes the slowest that began over a second ago, else is refused (0: "
        "the request bodies' share of --memory-limit, at most 256 MiB).",
        derived="the request bodies' share, at most 256 MiB",
    )  # fmt: skip
    max_connections: int = _limit(
        256, "connections", 1, 10_000,
        "TCP connections open at once (the unix socket has as many of its own); at the limit "
        "an idle or half-sent one makes room, and only when all are busy is a new one "
        "answered 503.",
    )  # fmt: skip
    max_per_client: int = _limit(
        64, "connections", 1, 10_000, "TCP connections open at once from one address."
    )
    max_head: int = _limit(
        64 * 1024, "bytes", 1024, 1 << 20,
        "Bytes of a request's head (its line and headers); more is answered 431.",
    )  # fmt: skip
    max_target: int = _limit(
        8 * 1024, "bytes", 256, 1 << 20,
        "Bytes of a request's line (method, path and query); more is answered 414.",
    )  # fmt: skip
    head_timeout: float = _limit(
        10.0, "seconds", 0.1, 3600,
        "Seconds a client has to send a request's head (and to idle between requests).",
        aliases=("--read-timeout",),
    )  # fmt: skip
    body_timeout: float = _limit(
        60.0, "seconds", 0.1, 3600, "Seconds a client has to send a request's body."
    )
    send_timeout: float = _limit(
        10.0, "seconds", 0.1, 3600,
        "Seconds a ZeroMQ peer has to take an answer written to it; one that does not read is "
        "closed (and may make room for a new connection meanwhile).",
    )  # fmt: skip
    linger: float = _limit(
        2.0, "seconds", 0.0, 60,
        "Seconds the rest of a body answered before it was read is still read away (so its "
        "client reads the answer, not a reset).",
    )  # fmt: skip
    deadline: float = _limit(
        30.0, "seconds", 0.1, 3600,
        "Seconds a request may wait for the NPU before it fails with 503 (and, once started, "
        "for the NPU's answer before it fails with 504).",
    )  # fmt: skip
    load_wait: float = _limit(
        120.0, "seconds", 0.0, 3600,
        "Seconds a request that arrives while the models load waits for them (as Immich's own "
        "server does) before it is answered 503 with Retry-After.",
    )  # fmt: skip
    ready_interval: float = _limit(
        5.0, "seconds", 0.0, 3600,
        "/ready recomputes the golden answers at most this often.",
    )  # fmt: skip
    memory_limit: int = _limit(
        0, "bytes", 0, 1 << 44,
        "Bytes of memory the server may use: the decode slots, the largest picture of each "
        "format and the request bodies held at once are derived from it (0: the cgroup's "
        "memory.max, as systemd's MemoryMax= sets it, else half the machine's memory).",
        derived="the cgroup's memory.max, else half the memory",
    )  # fmt: skip
    decodes: int = _limit(
        0, "images", 0, 64,
        "Images decoded at once (0: as many as --memory-limit holds, at most 2).",
        derived="from --memory-limit, at most 2",
    )  # fmt: skip
    max_detections: int = _limit(
        20, "detections", 1, 1000,
        "Detections in one DeepStack answer, best first (Frigate reads 20).",
    )  # fmt: skip

    def replace(self, **changes: Any) -> Limits:
        return dataclasses.replace(self, **changes)


def declarations() -> list[tuple[dataclasses.Field, Declaration]]:
    return [(item, item.metadata["limit"]) for item in dataclasses.fields(Limits)]


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def environment_variable(name: str) -> str:
    return ENVIRONMENT_PREFIX + name.upper()


def default_text(item: dataclasses.Field, declared: Declaration) -> str:
    return declared.derived or str(item.default)


Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]


def options() -> list[Decorator]:
    """One click option a limit: its flag (and older aliases), its environment variable, its
    range, default and help."""
    made: list[Decorator] = []
    for item, declared in declarations():
        kind: click.ParamType = (
            click.IntRange(int(declared.low), int(declared.high))
            if item.type in (int, "int")
            else click.FloatRange(declared.low, declared.high)
        )
        made.append(
            click.option(
                flag(item.name),
                *declared.aliases,
                item.name,
                type=kind,
                default=item.default,
                envvar=environment_variable(item.name),
                show_envvar=True,
                show_default=default_text(item, declared),
                help=declared.help,
            )
        )
    return made


def from_options(values: Mapping[str, Any]) -> Limits:
    """The limits among a command's parameters (the others are left alone)."""
    return Limits(**{item.name: values[item.name] for item, _ in declarations()})


def limit_names() -> frozenset[str]:
    return frozenset(item.name for item, _ in declarations())


def table() -> str:
    """docs/serving.md's table of limits (generated: make docs-tables)."""
    lines = [
        "| flag | environment | default | unit | what it bounds |",
        "|---|---|---|---|---|",
    ]
    for item, declared in declarations():
        lines.append(
            f"| `{flag(item.name)}` | `{environment_variable(item.name)}` | "
            f"{default_text(item, declared)} | {declared.unit} | {declared.help} |"
        )
    return "\n".join(lines) + "\n"
