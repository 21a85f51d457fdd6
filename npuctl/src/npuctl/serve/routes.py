"""Every route npuctl serve answers, once: the router (.app), the OpenAPI document (.openapi)
and the route list in docs/serving.md are all made from this table."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field

# Whose error shape a route answers in (a client parses its own API's errors only).
OPENAI, DEEPSTACK, V2, IMMICH, SERVER = "openai", "deepstack", "v2", "immich", "server"
# What bounds a body: the text limit (--max-body) or the upload limit (--max-upload).
TEXT, UPLOAD = "text", "upload"
JSON, FORM, BINARY = "application/json", "multipart/form-data", "application/octet-stream"


@dataclass(frozen=True)
class Route:
    method: str  # GET (HEAD too), POST, or * (any)
    path: str  # aiohttp's pattern: {name} is a path parameter
    handler: str  # the coroutine of .app.Api that answers it
    api: str  # whose error shape (OPENAI, DEEPSTACK, V2, IMMICH, SERVER)
    summary: str
    public: str | None = None  # the --public group that opens it without the key
    body: str | None = None  # the limit its body is held to (TEXT, UPLOAD); None: no body
    request: dict[str, str | None] = field(default_factory=dict)  # media type -> schema
    responses: dict[str, tuple[str, str | None]] = field(default_factory=dict)  # status ->
    # (description, schema); 401, 413, 429 and 503 are added from the route's other facts
    inference: bool = False  # reaches the NPU: 429 (queue full) and 503/504 may answer
    timed: bool = False  # answers carry Server-Timing


def _vision(task: str, summary: str, answer: str) -> Route:
    """DeepStack's form routes: the same form, one task each."""
    return Route(
        "POST",
        f"/v1/vision/{task}",
        task,
        DEEPSTACK,
        summary,
        body=UPLOAD,
        request={FORM: "VisionForm", "application/x-www-form-urlencoded": "VisionForm"},
        inference=True,
        timed=True,
        responses={
            "200": ("Found.", answer),
            "400": ("Not a form, no image, a broken image, too many pixels.", "VisionError"),
            "404": (f"No {task} model is served.", "VisionError"),
            "415": ("Not a JPEG, PNG, WebP or BMP image.", "VisionError"),
        },
    )


def _v2_model(path: str, **more: object) -> Route:
    return Route(path=path, **more)  # type: ignore[arg-type]


_MODEL = ("404", ("No such model.", "V2Error"))
_DEEPSTACK_UNSERVED = "A DeepStack route this server does not offer (scene, face, custom models)."

ROUTES: tuple[Route, ...] = (
    Route(
        "GET",
        "/health",
        "health",
        SERVER,
        "The process answers and the NPU is not hung.",
        public="health",
        responses={"200": ("Alive.", "Health"), "503": ("An NPU call hung.", "Health")},
    ),
    Route(
        "GET",
        "/ready",
        "ready",
        SERVER,
        "Every model's golden input gives its start-up answer.",
        public="health",
        responses={"200": ("Ready.", "Health"), "503": ("Not ready.", "Health")},
    ),
    Route(
        "GET",
        "/metrics",
        "metrics",
        SERVER,
        "Prometheus metrics, per model and per stage.",
        public="metrics",
        responses={"200": ("Metrics (Prometheus text).", None)},
    ),
    Route(
        "GET",
        "/openapi.json",
        "openapi",
        SERVER,
        "This document.",
        public="openapi",
        responses={"200": ("OpenAPI 3.1.", None)},
    ),
    Route(
        "GET",
        "/v1/models",
        "models",
        OPENAI,
        "The embedding models (OpenAI).",
        responses={"200": ("Models.", "ModelList")},
    ),
    Route(
        "GET",
        "/v1/models/{model}",
        "model",
        OPENAI,
        "One embedding model (OpenAI).",
        responses={"200": ("The model.", "Model"), "404": ("No such model.", "OpenAIError")},
    ),
    Route(
        "POST",
        "/v1/embeddings",
        "embeddings",
        OPENAI,
        "Embeddings of texts and images (OpenAI).",
        body=TEXT,
        request={JSON: "EmbeddingsRequest"},
        inference=True,
        responses={
            "200": ("The vectors.", "Embeddings"),
            "400": ("Invalid input.", "OpenAIError"),
            "404": ("No such embedding model.", "OpenAIError"),
            "415": ("An image in none of the formats served.", "OpenAIError"),
        },
    ),
    _vision(
        "detection", "Objects in an image, best first (DeepStack / CodeProject.AI).", "Detections"
    ),
    _vision("classification", "The classes of an image, best first.", "Classes"),
    Route(
        "*",
        "/v1/vision/{unserved:.*}",
        "deepstack_unserved",
        DEEPSTACK,
        _DEEPSTACK_UNSERVED,
        body=UPLOAD,
        responses={"404": ("Not offered here.", "VisionError")},
    ),
    Route(
        "GET",
        "/v2",
        "v2_server",
        V2,
        "Server metadata (KServe v2).",
        responses={"200": ("Metadata.", "V2Server")},
    ),
    Route(
        "GET",
        "/v2/health/live",
        "v2_live",
        V2,
        "Live (KServe v2).",
        public="health",
        responses={"200": ("Live.", None)},
    ),
    Route(
        "GET",
        "/v2/health/ready",
        "v2_ready",
        V2,
        "Ready (KServe v2).",
        public="health",
        responses={"200": ("Ready.", None), "503": ("Not ready.", None)},
    ),
    Route(
        "POST",
        "/v2/repository/index",
        "v2_index",
        V2,
        "The model repository's index (Triton).",
        responses={"200": ("The models and their state.", "V2Index")},
    ),
    Route(
        "GET",
        "/v2/models/stats",
        "v2_all_stats",
        V2,
        "Every model's statistics (the statistics extension).",
        responses={"200": ("Statistics.", "V2Statistics")},
    ),
    *(
        route
        for prefix in ("/v2/models/{name}", "/v2/models/{name}/versions/{version}")
        for route in (
            _v2_model(
                f"{prefix}",
                method="GET",
                handler="v2_model",
                api=V2,
                summary="A model's tensors (KServe v2).",
                responses={"200": ("Metadata.", "V2Model"), "404": _MODEL[1]},
            ),
            _v2_model(
                f"{prefix}/ready",
                method="GET",
                handler="v2_model_ready",
                api=V2,
                summary="A model is ready (KServe v2).",
                responses={"200": ("Ready.", None), "503": ("Not ready.", None), "404": _MODEL[1]},
            ),
            _v2_model(
                f"{prefix}/config",
                method="GET",
                handler="v2_config",
                api=V2,
                summary="A model's configuration (Triton).",
                responses={"200": ("The configuration.", "V2Config"), "404": _MODEL[1]},
            ),
            _v2_model(
                f"{prefix}/stats",
                method="GET",
                handler="v2_stats",
                api=V2,
                summary="A model's statistics (the statistics extension).",
                responses={"200": ("Statistics.", "V2Statistics"), "404": _MODEL[1]},
            ),
            _v2_model(
                f"{prefix}/infer",
                method="POST",
                handler="v2_infer",
                api=V2,
                summary="Raw tensors in and out (KServe v2; JSON or the binary-data "
                "extension, gzip or deflate bodies).",
                body=UPLOAD,
                request={JSON: "V2InferRequest", BINARY: None},
                inference=True,
                timed=True,
                responses={
                    "200": ("The outputs.", "V2InferResponse"),
                    "400": ("A tensor of the wrong name, shape or datatype.", "V2Error"),
                    "404": _MODEL[1],
                    "415": ("A Content-Encoding other than gzip or deflate.", "V2Error"),
                },
            ),
        )
    ),
)

# Immich's machine learning: its server cannot send a key, so --public immich opens these.
ROUTES += (
    Route(
        "GET",
        "/ping",
        "immich_ping",
        IMMICH,
        "Immich's availability check: pong.",
        public="immich",
        responses={"200": ("pong (text/plain).", None)},
    ),
    Route(
        "GET",
        "/",
        "immich_root",
        IMMICH,
        "Immich's machine-learning root.",
        public="immich",
        responses={"200": ("Its name.", "ImmichRoot")},
    ),
    Route(
        "POST",
        "/predict",
        "immich_predict",
        IMMICH,
        "A CLIP embedding of a photo or a text for Immich's smart search.",
        public="immich",
        body=UPLOAD,
        request={FORM: "ImmichForm"},
        inference=True,
        timed=True,
        responses={
            "200": ("The embedding, and a photo's decoded size.", "ImmichClip"),
            "400": ("No image or text, both, or a broken image.", "ImmichError"),
            "415": ("Not a JPEG, PNG, WebP or BMP image.", "ImmichError"),
            "422": ("Entries not understood, a task or model not computed here.", "ImmichError"),
        },
    ),
)

# What answers without the API key unless --public says otherwise.
PUBLIC_DEFAULT = frozenset({"health", "openapi"})
PUBLIC_GROUPS = tuple(sorted({route.public for route in ROUTES if route.public}))


def api_of(path: str) -> str:
    """Whose error shape a path that matched no route answers in."""
    if path.startswith("/v1/vision/"):
        return DEEPSTACK
    if path == "/v2" or path.startswith("/v2/"):
        return V2
    if path in ("/predict", "/ping"):
        return IMMICH
    return OPENAI


def methods_at(path: str) -> list[str]:
    """The methods the table serves at ``path``, as a 405's Allow lists them."""
    methods: set[str] = set()
    for route, pattern in _patterns():
        if pattern.fullmatch(path):
            methods.update(("GET", "HEAD") if route.method == "GET" else (route.method,))
    return sorted(methods)


@functools.cache
def _patterns() -> list[tuple[Route, re.Pattern[str]]]:
    """Each route's path as a regular expression: {name} one segment, {name:regex} the regex."""
    compiled = []
    for route in ROUTES:
        parts = re.split(r"\{\w+(?::([^}]*))?\}", route.path)
        # re.split gives literal, group, literal, group, ...: literals escaped, groups kept.
        pattern = "".join(
            re.escape(part) if index % 2 == 0 else f"(?:{part or '[^/]+'})"
            for index, part in enumerate(parts)
        )
        compiled.append((route, re.compile(pattern)))
    return compiled


def listing() -> str:
    """The routes as docs/serving.md lists them (generated: make docs-tables)."""
    lines = ["| method | path | API | without the key |", "|---|---|---|---|"]
    for route in ROUTES:
        public = f"with `--public {route.public}`" if route.public else "no"
        method = "any" if route.method == "*" else route.method
        path = route.path.replace("{unserved:.*}", "{other}")
        lines.append(f"| {method} | `{path}` | {route.api} | {public} |")
    return "\n".join(lines) + "\n"
