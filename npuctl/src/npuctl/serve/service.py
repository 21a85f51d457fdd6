"""What every listener of npuctl serve shares, and the work of each API: the NPU owners, the
served models, the limits, the metrics and the requests in flight (for draining). The methods
here run on the server's request threads (the NPU call blocks); the HTTP side is .app."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
from PIL import Image

from ..defaults import DEFAULT_MAX_IMAGE_PIXELS
from ..embedder import NpuFailure, Prepared, Rejected
from ..embeddings import normalise
from ..errors import InputError
from ..images import ImageFormatError, decode_rgb, give_back_memory
from . import api, auth, immich, kserve, vision_api
from .metrics import Metrics
from .models import DETECTION, ServedModel, Serving
from .owner import GOLDEN_MIN_COSINE, NpuOwner, QueueFull, Work, golden_view, similarity
from .routes import PUBLIC_DEFAULT

log = logging.getLogger("npuctl.serve")

# How often a waiting request looks whether its client is still there.
_PEER_CHECK_SECONDS = 0.2
MiB = 1024 * 1024
# Pixels from which a decoded picture's memory is handed back at once (a 4K frame is 8.3 M).
LARGE_PICTURE = 4_000_000


@dataclass(frozen=True)
class Limits:
    """Every bound of the server, with its flag in 'npuctl serve --help'; docs/serving.md's
    table of limits is generated from these fields and their comments."""

    max_body: int = 2 * MiB  # bytes of a text request's body (text-embeddings-inference's)
    max_upload: int = 24 * MiB  # bytes of an image or tensor request's body (a 4K snapshot)
    max_inputs: int = 64  # inputs in one embeddings request
    max_images: int = 8  # images in one embeddings request
    max_connections: int = 256  # TCP connections open at once (the unix socket has as many)
    max_per_client: int = 64  # TCP connections open at once from one address
    head_timeout: float = 10.0  # seconds to send a request's head, and to idle between requests
    body_timeout: float = 60.0  # seconds to send a request's body
    deadline: float = 30.0  # seconds a request may wait for the NPU to start it
    ready_interval: float = 5.0  # /ready recomputes the golden answers at most this often
    max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS  # of one image, checked before decoding
    decodes: int = 2  # images decoded at once (each may take width x height x 3 bytes)
    max_detections: int = 20  # detections in one DeepStack answer (what Frigate reads)


class ClientGone(Exception):
    pass


class Service:
    """What every listener shares: the NPU owners, the served models, the limits, the
    metrics, the open connections and the requests in flight (for draining)."""

    def __init__(
        self,
        serving: Serving,
        owner: NpuOwner,
        metrics: Metrics,
        limits: Limits,
        truncate: bool,
        platform: str = "npuctl",
        key: bytes | None = None,
        public: frozenset[str] = PUBLIC_DEFAULT,
    ) -> None:
        self.serving = serving
        self.embedder = serving.embedder
        self.owner = owner
        self.metrics = metrics
        self.limits = limits
        self.model_names = self.embedder.model_names if self.embedder else ()
        self.truncate = truncate
        self.platform = platform
        self.key = key
        self.public = public
        self.created = int(time.time())
        self.loaded = threading.Event()
        self.draining = threading.Event()
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._in_flight = 0
        self._decodes = threading.BoundedSemaphore(limits.decodes)
        self.stats = kserve.Statistics(list(serving.models))
        self._ready_lock = threading.Lock()
        self._ready: tuple[float, bool, str] = (0.0, False, "not checked yet")

    # -- requests in flight ---------------------------------------------------------------
    def begin(self) -> None:
        with self._lock:
            self._in_flight += 1

    def end(self) -> None:
        with self._lock:
            self._in_flight -= 1
            if not self._in_flight:
                self._idle.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        with self._lock:
            return self._idle.wait_for(lambda: not self._in_flight, timeout)

    # -- answers --------------------------------------------------------------------------
    def authorized(self, *offered: bytes | None) -> bool:
        """Whether any of the credentials offered is the key (a Bearer header and DeepStack's
        form field are alternatives: an empty field never outweighs a valid header)."""
        key = self.key
        return key is None or any(auth.matches(key, item) for item in offered if item)

    def healthy(self) -> tuple[bool, str]:
        """The process answers, and no NPU call has hung past the deadline."""
        busy_since = self.owner.busy_since
        if busy_since is not None and time.monotonic() - busy_since > self.limits.deadline:
            return False, (
                f"an NPU call has not returned for {time.monotonic() - busy_since:.0f} s "
                "(run 'npuctl doctor')"
            )
        return True, "ok"

    def ready(self) -> tuple[bool, str]:
        if self.draining.is_set():
            return False, "shutting down"
        if not self.loaded.is_set():
            return False, "loading the models"
        with self._ready_lock:
            checked, ok, reason = self._ready
            if time.monotonic() - checked < self.limits.ready_interval:
                return ok, reason
            ok, reason = True, "ready"
            for name, model in self.serving.models.items():
                try:
                    outputs, _ = self._infer(model.key, model.golden()[0], lambda: False)
                except api.ApiError as error:
                    if error.status == 429:
                        return self._ready[1], self._ready[2]  # busy, not broken
                    ok, reason = False, f"{name}: the golden input failed: {error}"
                    break
                agreement = similarity(golden_view(model, outputs), self.owner.golden[name])
                if agreement < GOLDEN_MIN_COSINE:
                    ok, reason = (
                        False,
                        (
                            f"{name}: the golden answer drifted (cosine {agreement:.4f} to "
                            "the one computed at start): run 'npuctl doctor'"
                        ),
                    )
                    break
            self._ready = (time.monotonic(), ok, reason)
            self.metrics.ready.set(1 if ok else 0)
            return ok, reason

    def _check_loaded(self) -> None:
        if not self.loaded.is_set():
            raise api.ApiError(
                503,
                "the models are still loading",
                "loading",
                kind="loading",
                headers={"Retry-After": "1"},
            )

    def _submit(self, items: list[tuple[str, list[np.ndarray]]]) -> list[Work]:
        try:
            return self.owner.submit(items, time.monotonic() + self.limits.deadline)
        except QueueFull as full:
            raise api.ApiError(
                429,
                f"the NPU's queue is full ({self.owner.capacity} inputs): {full}",
                "queue_full",
                kind="queue_full",
                headers={"Retry-After": str(full.retry_after)},
            ) from None

    def _infer(
        self, key: str, tensors: list[np.ndarray], peer_gone: Callable[[], bool]
    ) -> tuple[list[np.ndarray], Work]:
        (work,) = works = self._submit([(key, tensors)])
        (outputs,) = self._results(works, peer_gone)
        return outputs, work

    def embed(self, body: bytes, peer_gone: Callable[[], bool]) -> bytes:
        """POST /v1/embeddings on a request thread: prepare, wait for the NPU, answer."""
        asked, works = self.embed_prepare(body)
        return self.embed_answer(asked, self._results(works, peer_gone))

    def embed_prepare(self, body: bytes) -> tuple[api.Request, list[Work]]:
        """The request's inputs prepared and queued for the NPU."""
        self._check_loaded()
        embedder = self.embedder
        if embedder is None:
            raise api.ApiError(
                404,
                "this server has no embedding model: start it with an embedding model in "
                "--models (POST /v2/repository/index lists what it serves)",
                "model_not_found",
                kind="model_not_found",
            )
        started = time.perf_counter()
        request = api.parse(
            body,
            embedder,
            self.model_names,
            self.limits.max_inputs,
            self.truncate,
            self.limits.max_images,
            lambda: self._decodes,
        )
        self.metrics.stage("preprocess", time.perf_counter() - started)
        works = self._submit(
            [(embedder.keys[item.modality], [item.tensor]) for item in request.inputs]
        )
        return request, works

    def embed_answer(self, request: api.Request, results: list[list[np.ndarray]]) -> bytes:
        embedder = self.embedder
        assert embedder is not None
        encoded = time.perf_counter()
        encode = api.encoder(request.encoding)
        tokens = sum(item.tokens for item in request.inputs)
        vectors = [
            encode(normalise(embedder.vector(item.modality, outputs)))
            for item, outputs in zip(request.inputs, results, strict=True)
        ]
        answer = api.reply(vectors, self.model_names[0], tokens)
        self.metrics.stage("serialize", time.perf_counter() - encoded)
        for item in request.inputs:
            self.metrics.input(item.modality)
            self.metrics.model_answered(embedder.keys[item.modality], "ok")
        self.metrics.tokens.inc(tokens)
        return answer

    # -- Immich's machine learning (POST /predict) --------------------------------------
    def immich_parse(self, fields: dict[str, bytes]) -> immich.Asked:
        self._check_loaded()
        embedder = self.embedder
        return immich.parse(fields, embedder.immich_names if embedder else ())

    def immich_text(self, asked: immich.Asked) -> tuple[Prepared, list[Work]]:
        """A text prepared (cut to the window, as Immich's tokenizer does) and queued."""
        embedder = self.embedder
        assert embedder is not None and asked.text is not None  # parse() saw to it
        started = time.perf_counter()
        try:
            prepared = embedder.prepare_text(immich.cleaned(asked.text), True)
        except Rejected as error:
            raise api.ApiError(400, str(error), error.code) from None
        self.metrics.stage("preprocess", time.perf_counter() - started)
        return prepared, self._submit([(embedder.keys["text"], [prepared.tensor])])

    def immich_answer(
        self, prepared: Prepared, outputs: list[np.ndarray], size: tuple[int, int] | None
    ) -> bytes:
        embedder = self.embedder
        assert embedder is not None
        self.metrics.input(prepared.modality)
        self.metrics.model_answered(embedder.keys[prepared.modality], "ok")
        return immich.answer(normalise(embedder.vector(prepared.modality, outputs)), size)

    def immich_photo(
        self, asked: immich.Asked, peer_gone: Callable[[], bool]
    ) -> tuple[bytes, dict[str, str]]:
        """A photo on a request thread: decoded, prepared as Immich prepares it, embedded;
        Server-Timing as for vision."""
        embedder = self.embedder
        assert embedder is not None and asked.image is not None
        started, cpu_started = time.perf_counter(), time.thread_time()
        picture = self.decode(asked.image, "the image")
        decoding, decode_cpu = time.perf_counter() - started, time.thread_time() - cpu_started
        size = picture.size
        try:
            prepared = embedder.prepare_photo(picture)
        except Rejected as error:  # no image model
            raise api.ApiError(422, str(error), error.code) from None
        del picture
        if size[0] * size[1] >= LARGE_PICTURE:
            give_back_memory()
        prepared_at = time.perf_counter()
        self.metrics.stage("decode", decoding)
        self.metrics.stage("preprocess", prepared_at - started - decoding)
        outputs, work = self._infer(embedder.keys["image"], [prepared.tensor], peer_gone)
        finished = time.perf_counter()
        answer = self.immich_answer(prepared, outputs, size)
        answered = time.perf_counter()
        return answer, server_timing(
            decode=decoding,
            preprocess=prepared_at - started - decoding,
            queue=work.queued_seconds,
            npu=work.npu_seconds,
            postprocess=answered - finished,
            total=answered - started,
            cpu=time.thread_time() - cpu_started - decode_cpu,
        )

    def hung(self, work: Work) -> api.ApiError:
        """The answer to a request whose NPU call did not return in time."""
        self.metrics.model_answered(work.key, "npu_timeout")
        return api.ApiError(
            504,
            f"the NPU did not answer within {2 * self.limits.deadline:g} s",
            "npu_timeout",
            kind="npu_timeout",
        )

    def outputs(self, work: Work) -> list[np.ndarray]:
        """A finished work's outputs, or its failure as the answer."""
        try:
            outputs = work.result(0)
        except NpuFailure as failure:
            self.metrics.model_answered(work.key, failure.kind)
            raise api.ApiError(
                503, f"the NPU failed: {failure}", failure.kind, kind=failure.kind
            ) from None
        assert outputs is not None
        return outputs

    def vision(
        self, task: str, asked: vision_api.VisionRequest, peer_gone: Callable[[], bool]
    ) -> tuple[bytes, dict[str, str]]:
        """POST /v1/vision/detection or /classification, DeepStack's way (the form read and
        the key checked by the caller); the answer's Server-Timing header tells where its
        time went."""
        self._check_loaded()
        started, cpu_started = time.perf_counter(), time.thread_time()
        candidates = self.serving.of_task(task)
        if not candidates:
            raise api.ApiError(
                404,
                f"this server has no {task} model: start it with one in --models "
                "(POST /v2/repository/index lists what it serves)",
                "model_not_found",
                kind="model_not_found",
            )
        model = candidates[0]
        decoding, cpu_decoding = time.perf_counter(), time.thread_time()
        picture = self.decode(asked.image, "the image")
        decoded, decode_cpu = time.perf_counter(), time.thread_time() - cpu_decoding
        tensors, context = model.prepare(picture)  # type: ignore[attr-defined]
        size = picture.size
        del picture
        if size[0] * size[1] >= LARGE_PICTURE:
            give_back_memory()  # the picture is freed: its megabytes go back to the system
        preprocess = time.perf_counter() - decoded + (decoding - started)
        self.metrics.stage("decode", decoded - decoding)
        self.metrics.stage("preprocess", preprocess)
        outputs, work = self._infer(model.key, tensors, peer_gone)
        finished = time.perf_counter()
        if task == DETECTION:
            found = model.detections(  # type: ignore[attr-defined]  # a Detector, by its task
                outputs, context, asked.min_confidence, self.limits.max_detections
            )
            answer = vision_api.detection_reply(
                found, size, self.limits.max_detections, finished - started
            )
        else:
            classes = model.classes(outputs, asked.top_k)  # type: ignore[attr-defined]
            answer = vision_api.classification_reply(classes, finished - started)
        answered = time.perf_counter()
        self.metrics.stage("serialize", answered - finished)
        self.metrics.model_answered(model.name, "ok")
        return answer, server_timing(
            decode=decoded - decoding,
            preprocess=preprocess,
            queue=work.queued_seconds,
            npu=work.npu_seconds,
            postprocess=answered - finished,
            total=answered - started,
            # the request's own work, decode aside: what a busy machine cannot inflate
            cpu=time.thread_time() - cpu_started - decode_cpu,
        )

    def decode(self, data: bytes, what: str) -> Image.Image:
        """An uploaded image as RGB: one of the formats served, its size checked before any
        pixel is decoded, and at most ``limits.decodes`` decoding at once."""
        with self._decodes:
            try:
                return decode_rgb(data, self.limits.max_image_pixels, what)
            except ImageFormatError as error:
                raise api.ApiError(415, str(error), "unsupported_media_type") from None
            except InputError as error:
                give_back_memory()
                raise api.ApiError(400, str(error), "invalid_image") from None

    def v2_infer(
        self, name: str, body: bytes, headers: Mapping[str, str], peer_gone: Callable[[], bool]
    ) -> tuple[bytes, dict[str, str]]:
        self._check_loaded()
        model = self.v2_model(name)
        started = time.perf_counter()
        try:
            asked = kserve.parse(body, headers, model)
        except kserve.V2Error as error:
            raise api.ApiError(400, str(error), "invalid_request") from None
        parsed = time.perf_counter()
        self.metrics.stage("preprocess", parsed - started)
        outputs, work = self._infer(model.key, asked.tensors, peer_gone)
        finished = time.perf_counter()
        body, headers = kserve.reply(model, asked, outputs)
        answered = time.perf_counter()
        self.metrics.stage("serialize", answered - finished)
        self.metrics.model_answered(model.name, "ok")
        self.stats.record(model.name, work.queued_seconds, work.npu_seconds, answered - finished)
        timing = server_timing(
            preprocess=parsed - started,
            queue=work.queued_seconds,
            npu=work.npu_seconds,
            postprocess=answered - finished,
            total=answered - started,
        )
        return body, {**headers, **timing}

    def v2_model(self, name: str) -> ServedModel:
        model = self.serving.models.get(name)
        if model is None:
            raise api.ApiError(
                404,
                f"no model {name[:100]!r}; this server has {', '.join(self.serving.models)}",
                "model_not_found",
                kind="model_not_found",
            )
        return model

    def _results(self, works: list[Work], peer_gone: Callable[[], bool]) -> list[list[np.ndarray]]:
        """Each work's outputs, in order, waited for on a request thread; a client that left
        cancels them, and an NPU call that does not return within the deadline (after its
        start, or its own deadline to start) ends the request with 504 while the call goes
        on."""
        results = []
        try:
            for work in works:
                hung = work.deadline + self.limits.deadline
                while not work.wait(_PEER_CHECK_SECONDS):
                    if peer_gone():
                        raise ClientGone
                    if time.monotonic() > hung:
                        raise self.hung(work)
                results.append(self.outputs(work))
        except (ClientGone, api.ApiError):
            _cancel(works)
            raise
        return results


def server_timing(**seconds: float) -> dict[str, str]:
    """The W3C Server-Timing header (milliseconds): browsers' and curl users' view of where a
    request's time went, and the benchmark's."""
    stages = ", ".join(f"{name};dur={value * 1000:.3f}" for name, value in seconds.items())
    return {"Server-Timing": stages}


def unauthorized() -> api.ApiError:
    return api.ApiError(
        401,
        "a valid API key is required: send 'Authorization: Bearer KEY' (or the form field api_key)",
        "invalid_api_key",
        kind="unauthorized",
        headers={"WWW-Authenticate": "Bearer"},
    )


def _cancel(works: list[Work]) -> None:
    for work in works:
        work.cancelled = True
