"""The open inference protocol (KServe v2, as Triton speaks it over HTTP): health, server and
model metadata, Triton's model configuration, statistics and repository index, and inference
requests as JSON tensors or with the binary-data extension (a JSON header of
Inference-Header-Content-Length bytes, then each binary tensor's bytes in order), which is
what Triton's own client sends by default; gzip or deflate bodies; errors as
{"error": message}."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from aiohttp import web

from ... import __version__
from ..errors import ApiError
from ..models import NUMPY_OF_V2, ServedModel, TensorMeta
from ..protocol import BINARY, JSON, UPLOAD, Call, HttpApi, Route, json_response
from ..service import ModelStatistics, Service, server_timing

HEADER_LENGTH = "inference-header-content-length"
VERSION = "1"  # every model has one version


class V2Error(ValueError):
    """A request the model cannot take: 400."""


@dataclass
class InferRequest:
    id: str | None
    tensors: list[np.ndarray]  # in the model's input order
    outputs: list[Wanted]  # the outputs to return


@dataclass(frozen=True)
class Wanted:
    """An output to return: as binary data or JSON, whole or as its top classes (the
    classification extension: "score:index[:label]" strings, best first)."""

    meta: TensorMeta
    binary: bool
    classes: int = 0


def metadata(model: ServedModel, platform: str) -> dict[str, Any]:
    return {
        "name": model.name,
        "versions": [VERSION],
        "platform": platform,
        "inputs": [meta.document() for meta in model.inputs],
        "outputs": [meta.document() for meta in model.outputs],
    }


def parse(body: bytes, headers: Mapping[str, str], model: ServedModel) -> InferRequest:
    header_length = headers.get(HEADER_LENGTH)
    if header_length is not None:
        try:
            split = int(header_length)
        except ValueError:
            raise V2Error("Inference-Header-Content-Length is not a number") from None
        if not 0 < split <= len(body):
            raise V2Error(
                f"Inference-Header-Content-Length {split} is outside the body's {len(body)} bytes"
            )
        head, binary = body[:split], memoryview(body)[split:]
    else:
        head, binary = body, memoryview(b"")
    try:
        document = json.loads(head)
    except (ValueError, RecursionError) as error:
        raise V2Error(f"the request is not valid JSON ({error})") from None
    if not isinstance(document, dict) or not isinstance(document.get("inputs"), list):
        raise V2Error('the request must be a JSON object with a list "inputs"')
    request_id = document.get("id")
    given: dict[str, np.ndarray] = {}
    offset = 0
    wanted = {meta.name: meta for meta in model.inputs}
    for item in document["inputs"]:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise V2Error('each input must be an object with a "name"')
        name = item["name"]
        meta = wanted.get(name)
        if meta is None:
            raise V2Error(
                f"{model.name} has no input {name[:100]!r}; its inputs: "
                + ", ".join(f"{m.name} ({m.datatype} {list(m.shape)})" for m in model.inputs)
            )
        array, used = _tensor(item, meta, binary[offset:])
        offset += used
        given[name] = array
    if offset != len(binary):
        raise V2Error(f"{len(binary) - offset} bytes of binary data belong to no input")
    missing = [name for name in wanted if name not in given]
    if missing:
        raise V2Error(f"{model.name} needs the input(s) {', '.join(missing)}")
    return InferRequest(
        request_id if isinstance(request_id, str) else None,
        [given[meta.name] for meta in model.inputs],
        _outputs(document, model),
    )


def _tensor(item: dict, meta: TensorMeta, binary: memoryview) -> tuple[np.ndarray, int]:
    """An input's array, from its binary data or its JSON "data", and the bytes it took."""
    datatype, shape = item.get("datatype"), item.get("shape")
    if datatype != meta.datatype:
        raise V2Error(f"input {meta.name} is {meta.datatype}, not {str(datatype)[:20]}")
    if not isinstance(shape, list) or not all(
        isinstance(size, int) and not isinstance(size, bool) for size in shape
    ):
        raise V2Error(f'input {meta.name}: "shape" must be a list of integers')
    if tuple(shape) != meta.shape:
        raise V2Error(f"input {meta.name} has the shape {list(meta.shape)}, not {shape[:8]}")
    parameters = item.get("parameters") or {}
    size = parameters.get("binary_data_size") if isinstance(parameters, dict) else None
    if size is not None:
        return _binary_tensor(meta, size, binary), size
    return _json_tensor(meta, item.get("data")), 0


def _binary_tensor(meta: TensorMeta, size: object, binary: memoryview) -> np.ndarray:
    dtype = NUMPY_OF_V2[meta.datatype]
    expected = meta.elements * dtype.itemsize
    if not isinstance(size, int) or isinstance(size, bool):
        raise V2Error(f"input {meta.name}: binary_data_size must be a whole number of bytes")
    if size != expected:
        raise V2Error(f"input {meta.name} takes {expected} bytes of binary data, not {size}")
    if len(binary) < size:
        raise V2Error(f"input {meta.name}: the body ends before its {size} bytes")
    return np.frombuffer(binary[:size], dtype=dtype).reshape(meta.shape).copy()


def _json_tensor(meta: TensorMeta, data: object) -> np.ndarray:
    dtype = NUMPY_OF_V2[meta.datatype]
    if data is None:
        raise V2Error(f'input {meta.name} has no "data" (nor binary data)')
    try:
        values = np.asarray(data)
    except ValueError:
        raise V2Error(f"input {meta.name}: the data is not a regular array") from None
    if values.size != meta.elements or values.dtype.kind not in "biuf":
        raise V2Error(
            f"input {meta.name} takes {meta.elements} numbers, not {values.size} "
            f"{'numbers' if values.dtype.kind in 'biuf' else 'values of another kind'}"
        )
    if dtype.kind in "iu":
        limits = np.iinfo(dtype)
        if values.dtype.kind == "f" and not np.all(
            np.isfinite(values) & (values == np.rint(values))
        ):
            raise V2Error(f"input {meta.name} is {meta.datatype}: whole numbers only")
        if values.size and (values.min() < limits.min or values.max() > limits.max):
            raise V2Error(
                f"input {meta.name} is {meta.datatype}: values in {limits.min}..{limits.max}"
            )
    return values.astype(dtype).reshape(meta.shape)


def _outputs(document: dict, model: ServedModel) -> list[Wanted]:
    parameters = document.get("parameters") or {}
    binary_default = isinstance(parameters, dict) and parameters.get("binary_data_output") is True
    requested = document.get("outputs")
    if requested is None:
        return [Wanted(meta, binary_default) for meta in model.outputs]
    if not isinstance(requested, list):
        raise V2Error('"outputs" must be a list')
    by_name = {meta.name: meta for meta in model.outputs}
    chosen = []
    for item in requested:
        name = item.get("name") if isinstance(item, dict) else None
        if name not in by_name:
            raise V2Error(
                f"{model.name} has no output {str(name)[:100]!r}; its outputs: "
                + ", ".join(by_name)
            )
        options = item.get("parameters") or {}
        if not isinstance(options, dict):
            raise V2Error(f'output {name}: "parameters" must be an object')
        binary = options.get("binary_data", binary_default)
        classes = options.get("classification", 0)
        if not isinstance(classes, int) or isinstance(classes, bool) or not 0 <= classes <= 1000:
            raise V2Error(f"output {name}: classification must be a count from 0 to 1000")
        chosen.append(Wanted(by_name[name], binary is True, classes))
    return chosen


def reply(
    model: ServedModel, request: InferRequest, outputs: list[np.ndarray]
) -> tuple[bytes, dict[str, str]]:
    """The answer body and its extra headers."""
    index = {meta.name: i for i, meta in enumerate(model.outputs)}
    documents, blobs = [], []
    for wanted in request.outputs:
        meta = wanted.meta
        value = np.ascontiguousarray(outputs[index[meta.name]], dtype=meta.dtype)
        if wanted.classes:
            document, blob = _classified(meta, value, wanted, getattr(model, "labels", None))
        else:
            shape = list(meta.shape) if value.size == meta.elements else list(value.shape)
            document = {"name": meta.name, "datatype": meta.datatype, "shape": shape}
            blob = value.tobytes() if wanted.binary else None
            if blob is None:
                document["data"] = value.reshape(-1).tolist()
        if blob is not None:
            document["parameters"] = {"binary_data_size": len(blob)}
            blobs.append(blob)
        documents.append(document)
    answer: dict[str, Any] = {"model_name": model.name, "model_version": VERSION}
    if request.id is not None:
        answer["id"] = request.id
    answer["outputs"] = documents
    head = json.dumps(answer, separators=(",", ":")).encode()
    if not blobs:
        return head, {}
    return head + b"".join(blobs), {"Inference-Header-Content-Length": str(len(head))}


def statistics(snapshot: dict[str, ModelStatistics]) -> dict[str, Any]:
    """The statistics extension (GET /v2/models/stats, /v2/models/NAME/stats), as Triton's
    client reads it: per model, inferences and their time in the queue and on the NPU."""
    return {"model_stats": [_model_statistics(name, stats) for name, stats in snapshot.items()]}


def _model_statistics(name: str, stats: ModelStatistics) -> dict[str, Any]:
    total = stats.queue_ns + stats.infer_ns + stats.output_ns

    def duration(ns: int) -> dict[str, int]:
        return {"count": stats.count, "ns": ns}

    return {
        "name": name,
        "version": VERSION,
        "last_inference": stats.last,
        "inference_count": stats.count,
        "execution_count": stats.count,
        "inference_stats": {
            "success": duration(total),
            "fail": {"count": 0, "ns": 0},
            "queue": duration(stats.queue_ns),
            "compute_input": duration(0),
            "compute_infer": duration(stats.infer_ns),
            "compute_output": duration(stats.output_ns),
            "cache_hit": {"count": 0, "ns": 0},
            "cache_miss": {"count": 0, "ns": 0},
        },
        "batch_stats": [],
    }


def config(model: ServedModel, platform: str) -> dict[str, Any]:
    """GET /v2/models/NAME/config, in the shape of Triton's model configuration."""

    def tensor(meta: TensorMeta) -> dict[str, Any]:
        return {"name": meta.name, "data_type": f"TYPE_{meta.datatype}", "dims": list(meta.shape)}

    return {
        "name": model.name,
        "platform": platform,
        "backend": platform,
        "max_batch_size": 0,
        "input": [tensor(meta) for meta in model.inputs],
        "output": [tensor(meta) for meta in model.outputs],
        "instance_group": [{"name": model.name, "kind": "KIND_MODEL", "count": 1}],
    }


def repository_index(names: list[str], ready: bool) -> list[dict[str, str]]:
    state = "READY" if ready else "UNAVAILABLE"
    return [{"name": name, "version": VERSION, "state": state} for name in names]


def _classified(
    meta: TensorMeta, value: np.ndarray, wanted: Wanted, labels: list[str] | None
) -> tuple[dict[str, Any], bytes | None]:
    """Triton's classification extension: the top classes of a flat output."""
    flat = value.reshape(-1)
    count = min(wanted.classes, flat.size)
    best = np.argsort(-flat.astype(np.float64), kind="stable")[:count]
    entries = []
    for index in best:
        label = labels[index] if labels is not None and index < len(labels) else None
        text = f"{float(flat[index]):f}:{int(index)}"
        entries.append(f"{text}:{label}" if label is not None else text)
    document: dict[str, Any] = {"name": meta.name, "datatype": "BYTES", "shape": [count]}
    if not wanted.binary:
        document["data"] = entries
        return document, None
    blob = b"".join(
        len(encoded).to_bytes(4, "little") + encoded
        for encoded in (entry.encode() for entry in entries)
    )
    return document, blob


# -- handlers ------------------------------------------------------------------------------
def _dumps(document: object) -> bytes:
    return json.dumps(document, separators=(",", ":")).encode()


async def server(call: Call) -> web.Response:
    extensions = ["binary_tensor_data", "classification", "statistics", "model_repository"]
    return json_response(
        _dumps({"name": "npuctl", "version": __version__, "extensions": extensions})
    )


async def live(call: Call) -> web.Response:
    return web.Response(status=200 if call.service.healthy()[0] else 503)


async def ready(call: Call) -> web.Response:
    ok, _ = await call.service.ready()
    return web.Response(status=200 if ok else 503)


async def index(call: Call) -> web.Response:
    await call.body()  # an optional filter, read within the text limit
    service = call.service
    return json_response(
        _dumps(repository_index(list(service.serving.models), service.loaded.is_set()))
    )


async def all_statistics(call: Call) -> web.Response:
    service = call.service
    return json_response(_dumps(statistics(service.stats.snapshot(list(service.serving.models)))))


def _model(call: Call) -> ServedModel:
    match = call.request.match_info
    name, version = match["name"], match.get("version", VERSION)
    model = call.service.model(name)  # 404 for an unknown name
    if version != VERSION:
        raise ApiError(
            404,
            f"{name} has version {VERSION} only, not {version[:20]!r}",
            "model_not_found",
            kind="model_not_found",
        )
    return model


async def model_metadata(call: Call) -> web.Response:
    return json_response(_dumps(metadata(_model(call), call.service.platform)))


async def model_ready(call: Call) -> web.Response:
    _model(call)
    ok, _ = await call.service.ready()
    return web.Response(status=200 if ok else 503)


async def model_config(call: Call) -> web.Response:
    return json_response(_dumps(config(_model(call), call.service.platform)))


async def model_statistics(call: Call) -> web.Response:
    return json_response(_dumps(statistics(call.service.stats.snapshot([_model(call).name]))))


async def infer(call: Call) -> web.Response:
    model = _model(call)
    body = await call.body()
    service = call.service
    started = time.perf_counter()
    asked = await call.blocking(_parsed, body, call.request.headers, model)
    parsed = time.perf_counter()
    service.metrics.stage("preprocess", parsed - started)
    outputs, work = await service.infer(model.key, asked.tensors)
    finished = time.perf_counter()
    answer, headers = await call.blocking(reply, model, asked, outputs)  # JSON can be large
    answered = time.perf_counter()
    service.metrics.stage("serialize", answered - finished)
    service.answered(model, work, answered - finished)
    timing = server_timing(
        preprocess=parsed - started,
        queue=work.queued_seconds,
        npu=work.npu_seconds,
        postprocess=answered - finished,
        total=answered - started,
    )
    response = web.Response(body=answer, headers={**headers, **timing})
    response.content_type = BINARY if headers else JSON
    return response


def _parsed(body: bytes, headers: Mapping[str, str], model: ServedModel) -> InferRequest:
    try:
        return parse(body, headers, model)
    except V2Error as error:
        raise ApiError(400, str(error), "invalid_request") from None


def error_body(error: ApiError) -> bytes:
    return json.dumps({"error": str(error)}).encode()


# -- the protocol --------------------------------------------------------------------------
def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def schemas(service: Service) -> dict[str, Any]:
    return {
        "V2Server": {
            "type": "object",
            "required": ["name", "version", "extensions"],
            "properties": {
                "name": {"type": "string"},
                "version": {"type": "string"},
                "extensions": {"type": "array", "items": {"type": "string"}},
            },
        },
        "V2Tensor": {
            "type": "object",
            "required": ["name", "datatype", "shape"],
            "properties": {
                "name": {"type": "string"},
                "datatype": {"type": "string"},
                "shape": {"type": "array", "items": {"type": "integer"}},
                "parameters": {"type": "object"},
                "data": {"type": "array"},
            },
        },
        "V2Model": {
            "type": "object",
            "required": ["name", "versions", "platform", "inputs", "outputs"],
            "properties": {
                "name": {"type": "string"},
                "versions": {"type": "array", "items": {"type": "string"}},
                "platform": {"type": "string"},
                "inputs": {"type": "array", "items": _ref("V2Tensor")},
                "outputs": {"type": "array", "items": _ref("V2Tensor")},
            },
        },
        "V2InferRequest": {
            "type": "object",
            "required": ["inputs"],
            "properties": {
                "id": {"type": "string"},
                "parameters": {"type": "object"},
                "inputs": {"type": "array", "items": _ref("V2Tensor"), "minItems": 1},
                "outputs": {"type": "array", "items": {"type": "object"}},
            },
        },
        "V2InferResponse": {
            "type": "object",
            "required": ["model_name", "outputs"],
            "properties": {
                "model_name": {"type": "string"},
                "model_version": {"type": "string"},
                "id": {"type": "string"},
                "outputs": {"type": "array", "items": _ref("V2Tensor")},
            },
        },
        "V2Index": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["name"],
                "properties": {
                    "name": {"type": "string"},
                    "version": {"type": "string"},
                    "state": {"type": "string"},
                },
            },
        },
        "V2Statistics": {
            "type": "object",
            "required": ["model_stats"],
            "properties": {"model_stats": {"type": "array", "items": {"type": "object"}}},
        },
        "V2Config": {
            "type": "object",
            "required": ["name", "platform", "input", "output"],
            "properties": {
                "name": {"type": "string"},
                "platform": {"type": "string"},
                "max_batch_size": {"type": "integer"},
                "input": {"type": "array", "items": {"type": "object"}},
                "output": {"type": "array", "items": {"type": "object"}},
            },
        },
        "V2Error": {
            "type": "object",
            "required": ["error"],
            "properties": {"error": {"type": "string"}},
        },
    }


_NO_MODEL = ("No such model.", "V2Error")


def _model_routes(prefix: str) -> tuple[Route, ...]:
    return (
        Route(
            "GET",
            prefix,
            model_metadata,
            "A model's tensors (KServe v2).",
            responses={"200": ("Metadata.", "V2Model"), "404": _NO_MODEL},
        ),
        Route(
            "GET",
            f"{prefix}/ready",
            model_ready,
            "A model is ready (KServe v2).",
            responses={"200": ("Ready.", None), "503": ("Not ready.", None), "404": _NO_MODEL},
        ),
        Route(
            "GET",
            f"{prefix}/config",
            model_config,
            "A model's configuration (Triton).",
            responses={"200": ("The configuration.", "V2Config"), "404": _NO_MODEL},
        ),
        Route(
            "GET",
            f"{prefix}/stats",
            model_statistics,
            "A model's statistics (the statistics extension).",
            responses={"200": ("Statistics.", "V2Statistics"), "404": _NO_MODEL},
        ),
        Route(
            "POST",
            f"{prefix}/infer",
            infer,
            "Raw tensors in and out (KServe v2; JSON or the binary-data extension, gzip or "
            "deflate bodies).",
            body=UPLOAD,
            request={JSON: "V2InferRequest", BINARY: None},
            inference=True,
            timed=True,
            responses={
                "200": ("The outputs.", "V2InferResponse"),
                "400": ("A tensor of the wrong name, shape or datatype.", "V2Error"),
                "404": _NO_MODEL,
                "415": ("A Content-Encoding other than gzip or deflate.", "V2Error"),
            },
        ),
    )


API = HttpApi(
    "v2",
    (
        Route(
            "GET",
            "/v2",
            server,
            "Server metadata (KServe v2).",
            responses={"200": ("Metadata.", "V2Server")},
        ),
        Route(
            "GET",
            "/v2/health/live",
            live,
            "Live (KServe v2).",
            public="health",
            responses={"200": ("Live.", None)},
        ),
        Route(
            "GET",
            "/v2/health/ready",
            ready,
            "Ready (KServe v2).",
            public="health",
            responses={"200": ("Ready.", None), "503": ("Not ready.", None)},
        ),
        Route(
            "POST",
            "/v2/repository/index",
            index,
            "The model repository's index (Triton).",
            responses={"200": ("The models and their state.", "V2Index")},
        ),
        Route(
            "GET",
            "/v2/models/stats",
            all_statistics,
            "Every model's statistics (the statistics extension).",
            responses={"200": ("Statistics.", "V2Statistics")},
        ),
        *_model_routes("/v2/models/{name}"),
        *_model_routes("/v2/models/{name}/versions/{version}"),
    ),
    error_body,
    "V2Error",
    schemas,
    ("/v2", "/v2/"),
)
