"""Frigate's remote detector (its `zmq` detector, frigate/detectors/plugins/zmq_ipc.py in
blakeblackshear/frigate), over ZeroMQ (.zmtp): Frigate's REQ socket asks whether the model
it names is here (`model_request`), may upload it (`model_data`), then sends each frame as
[header, tensor]: the header's shape, dtype and model type, the tensor the raw C-order
bytes of the frame Frigate already resized to the model's input. The answer is one frame of
480 bytes: 20 rows of [class_id, score, y_min, x_min, y_max, x_max] float32, box corners
relative to the frame, best first, unused rows zero. Anything else Frigate reads as no
detections and logs, so every refusal is an answer too: a JSON frame saying why (one log
line per kind and peer here, the peer's text escaped; lines repeated per request are said at
most once a minute per peer).

The frames go through the same queue, NPU owners, metrics, readiness and drain as every
HTTP request, and the same detector pipeline as DeepStack's route (.pipeline)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import ipaddress
import json
import logging
import math
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeGuard

import click
import numpy as np

from ...defaults import DEFAULT_ZMQ_PORT, FRIGATE_UPLOADS_RECORD
from ...drivers import all_drivers
from ...errors import NpuctlError
from ...files import write_atomically, write_text_atomically
from ...models.manifest import FrigateFacts
from .. import pipeline, zmtp
from ..connections import Budget, client_key
from ..errors import ApiError
from ..limits import DEFAULT_PARTIAL_FRAMES
from ..models import DETECTION, ServedModel
from ..protocol import Listener, Running, Startup
from ..service import Service

log = logging.getLogger("npuctl.serve")

ROWS, COLUMNS = 20, 6  # Frigate's detection array
ANSWER_BYTES = ROWS * COLUMNS * 4
MIN_SCORE = 0.4  # Frigate's own post-processing's threshold, and DeepStack's default
HEADER_MAX = 64 * 1024  # bytes of a request's JSON frame
# Proxies a request may come through (RFC 28: a routing frame each), then the delimiter, a
# header, a tensor or a model file, and no more.
MAX_HOPS = zmtp.MAX_HOPS
MAX_FRAMES = MAX_HOPS + 3
REPEAT_SECONDS = 60.0  # a line repeated per request is said at most this often per peer
KEPT_RECORDS = 64  # uploads recorded for npuctl doctor, the latest
# Peers (addresses, IPv6 /64s) remembered, the least recently heard of forgotten first: the
# lines said about each, and the model each chose (a reconnecting REQ socket sends its
# frames without asking again, so the choice outlives the connection).
REMEMBERED_PEERS = 4096
# An upload that has arrived waits this long for the one being proven before it is refused
# (Frigate waits 30 s for the answer).
UPLOAD_WAIT = 20.0
# Frigate waits 30 s for the answer to its model request: a server still loading answers
# within it (a model Frigate is told is not loaded, it never asks for again).
HANDSHAKE_WAIT = 25.0
# Frigate sends its ModelTypeEnum's name; its value is accepted too.
MODEL_TYPE_VALUES = {"yologeneric": "yolo-generic"}
SUFFIX_OPTION = "upload_suffix"


# -- the options ---------------------------------------------------------------------------
def _endpoints(context: click.Context, parameter: click.Parameter, value: Any) -> list[str]:
    endpoints = [item for text in value or () for item in str(text).split()]
    for endpoint in endpoints:
        try:
            zmtp.Endpoint.parse(endpoint)
        except ValueError as error:
            raise click.BadParameter(str(error)) from None
    return endpoints


def _networks(
    context: click.Context, parameter: click.Parameter, value: str | None
) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    if not value:
        return []
    try:
        return [ipaddress.ip_network(part.strip(), strict=False) for part in value.split(",")]
    except ValueError as error:
        raise click.BadParameter(str(error)) from None


OPTIONS = (
    click.option(
        "--zmq",
        "zmq_endpoints",
        multiple=True,
        metavar="ENDPOINT",
        envvar="NPUCTL_SERVE_ZMQ",
        show_envvar=True,
        callback=_endpoints,
        help="Be Frigate's remote detector (its type: zmq) at this ZeroMQ endpoint: "
        f"tcp://*:{DEFAULT_ZMQ_PORT} for Frigate on another host, ipc:///PATH for Frigate on "
        "this one (a container sharing the socket's folder); repeatable [default: none].",
    ),
    click.option(
        "--zmq-allow",
        "zmq_allow",
        metavar="CIDR,...",
        envvar="NPUCTL_SERVE_ZMQ_ALLOW",
        show_envvar=True,
        callback=_networks,
        help="The client addresses the tcp:// endpoints take (Frigate's client sends no "
        "credentials; an ipc:// socket is 0660, its owner's and the NPU's group's) "
        "[default: every address that reaches the port].",
    ),
    click.option(
        "--zmq-uploads",
        "zmq_uploads",
        type=click.Path(path_type=Path, file_okay=False),
        default=None,
        envvar="NPUCTL_SERVE_ZMQ_UPLOADS",
        show_envvar=True,
        help="Take the model files Frigate uploads into this folder (each proven in a child "
        "process first, at most --max-model-upload bytes, served only to the address that "
        "uploaded it, for this run) [default: uploads are refused].",
    ),
)


# -- the answers ---------------------------------------------------------------------------
def _json(document: Mapping[str, object]) -> bytes:
    return json.dumps(document, separators=(",", ":")).encode()


def detection_rows(found: list[Any], width: int, height: int) -> bytes:
    """Frigate's 20 x 6 float32 array: best first, corners relative to the frame and within
    it, a box with no area left out, unused rows zero."""
    rows = np.zeros((ROWS, COLUMNS), dtype=np.float32)
    count = 0
    for detection in sorted(found, key=lambda d: -d.score):
        x1, y1, x2, y2 = (
            min(max(value / scale, 0.0), 1.0)
            for value, scale in zip(detection.box, (width, height, width, height), strict=True)
        )
        if x1 >= x2 or y1 >= y2 or not math.isfinite(detection.score):
            continue
        rows[count] = (detection.class_id, detection.score, y1, x1, y2, x2)
        count += 1
        if count == ROWS:
            break
    return rows.tobytes()


class Remembered(OrderedDict[str, Any]):
    """At most REMEMBERED_PEERS entries, the least recently used forgotten first."""

    def touch(self, key: str, default: Any) -> Any:
        value = self.setdefault(key, default)
        self.move_to_end(key)
        while len(self) > REMEMBERED_PEERS:
            self.popitem(last=False)
        return value


@dataclass
class Complaints:
    """One log line per kind of complaint and peer address (a peer that sends a thousand
    bad frames logs one line; the metrics count them all), its text escaped; and lines said
    per request (a model request, an upload) at most once a minute per peer and kind. The
    peers remembered are the REMEMBERED_PEERS heard of last: a new peer's lines are said
    whatever came before it."""

    peers: Remembered = field(default_factory=Remembered)

    def _of(self, client: str) -> tuple[set[str], dict[str, float]]:
        return self.peers.touch(client, (set(), {}))

    def say(self, client: str, kind: str, message: str, why: str | None = None) -> None:
        """Said once per peer and kind (and ``why``, where one kind has several reasons),
        at most 32 lines per peer."""
        said, _ = self._of(client)
        key = f"{kind} {why}" if why else kind
        if key in said or len(said) >= 32:
            return
        said.add(key)
        log.warning(
            "frigate: %s from %s: %s", kind.replace("_", " "), client, zmtp.escaped(message, 400)
        )

    def now_and_then(self, client: str, kind: str) -> bool:
        """Whether a line of this kind about this peer may be said now."""
        now = time.monotonic()
        _, last = self._of(client)
        if now - last.get(kind, -REPEAT_SECONDS) < REPEAT_SECONDS:
            return False
        if len(last) >= 64:
            last.clear()
        last[kind] = now
        return True


# -- a detector as Frigate sees it -----------------------------------------------------------
@dataclass(frozen=True)
class Served:
    """A detector Frigate may name, and how its frames look."""

    model: ServedModel
    facts: FrigateFacts
    owner: str | None = None  # an upload's: the only peer it is served to
    name: str = ""  # an upload's: the name its owner gave it

    def answers_to(self, name: str) -> bool:
        """Whether Frigate's model name (its model.path's file name) means this model: the
        manifest's name, the model file's name or another name the manifest gives, with or
        without an extension."""
        wanted = {self.name} if self.owner is not None else {self.model.name, *self.facts.names}
        return _stem(name) in {_stem(candidate) for candidate in wanted}

    @property
    def layout(self) -> tuple[int, ...]:
        """The model's input shape (batch, then its own channel order)."""
        return tuple(self.model.inputs[0].shape)

    def frame_shapes(self) -> dict[tuple[int, ...], bool]:
        """The frame shapes taken, each with whether it needs a transpose to the model's."""
        batch, first, second, third = self.layout
        if self.facts.input_tensor == "nchw":
            return {(batch, first, second, third): False, (batch, second, third, first): True}
        return {(batch, first, second, third): False, (batch, third, first, second): True}


def _stem(name: str) -> str:
    base = Path(name.strip()).name.lower()
    stem, dot, _ = base.rpartition(".")
    return stem if dot and stem else base


@dataclass
class PeerState:
    """A connection's peer (as connections are counted: an address, an IPv6 /64) and what
    its handshake chose."""

    key: str
    served: Served | None = None


@dataclass
class Judged:
    """What a header frame says: the request (None: not one) or why it is refused, and how
    many bytes its payload may have."""

    header: dict[str, Any] | None
    problem: tuple[str, str] | None  # (kind, message) of a request refused
    payload: int


@dataclass
class Expectation:
    """What the message being read may hold, decided frame by frame (its header says what
    its payload is, so the payload's size is checked before its bytes are read). Until the
    delimiter comes, a frame may be a proxy's routing frame or, from a DEALER that sends no
    envelope, the header: the next frame may be either's."""

    detector: FrigateDetector
    state: PeerState
    judged: tuple[zmtp.Data, Judged] | None = None  # the frame judged last, and its verdict
    holds_upload: bool = False  # this message is the one upload taken at a time
    upload_refusal: str | None = None  # why its upload is not taken
    fault: str | None = None  # a fault of the server's own while it was read

    def limit(self, frames: list[zmtp.Data]) -> int:
        """The next frame's limit; 0 (the message read away and answered) on a fault."""
        try:
            return self._limit(frames)
        except Exception as error:  # a bug: the message is still read away and answered
            self.fault = f"{type(error).__name__}: {error}"
            return 0

    def _limit(self, frames: list[zmtp.Data]) -> int:
        start = zmtp.envelope_end(frames)
        body = frames[start:]
        if not body:
            return HEADER_MAX  # the delimiter, the header or a routing frame
        routing = zmtp.MAX_ROUTING_ID if not start and len(body[-1]) <= zmtp.MAX_ROUTING_ID else 0
        if len(body) > 1:
            return routing  # nothing after the payload
        return max(routing, self.judge(body[0]).payload)

    def judge(self, data: zmtp.Data) -> Judged:
        if self.judged is None or self.judged[0] is not data:
            self.judged = (data, self.detector.judge(data, self))
        return self.judged[1]

    def body(self, frames: list[zmtp.Data]) -> tuple[list[zmtp.Data], list[zmtp.Data]]:
        """The routing envelope (sent back before the answer) and the request's frames."""
        start = zmtp.envelope_end(frames)
        return frames[:start], frames[start:]


class FrigateDetector:
    """The listening side: the detectors served, the peers' requests and their answers."""

    def __init__(self, startup: Startup) -> None:
        self.service: Service = startup.service
        options = startup.options
        self.allow = options["zmq_allow"]
        self.uploads: Path | None = options["zmq_uploads"]
        self.upload = startup.upload
        limits = self.service.limits
        self.upload_limit = limits.max_model_upload if self.uploads else 0
        self.max_uploads = limits.max_uploads
        self.max_uploads_total = limits.max_uploads_total
        self.arriving: dict[str, int] = {}  # uploads whose model file is on its way, a peer
        self.proving = asyncio.Lock()  # one upload is proven at a time
        self.complaints = Complaints()
        self.chosen = Remembered()  # the model each peer chose last
        # A peer's frames in the NPU's queue: its allowance, and how many hold or wait for it.
        self.turns: dict[str, tuple[asyncio.Semaphore, int]] = {}
        self.uploaded: list[dict[str, object]] = []
        if self.uploads is not None and (removed := forget_earlier_uploads(self.uploads)):
            log.info(
                "frigate: %d upload(s) of an earlier run removed from %s", removed, self.uploads
            )
        self.served = [
            Served(model, facts)
            for model in self.service.serving.of_task(DETECTION)
            if (facts := self.service.facts(model.name)) is not None
        ]

    def largest_frame(self) -> int:
        """The most bytes a request's payload may be read away at: a model file, or a tensor
        (--max-upload, as a tensor request over HTTP)."""
        limits = self.service.limits
        return max(limits.max_model_upload, limits.max_upload, HEADER_MAX)

    # -- requests ----------------------------------------------------------------------------
    def judge(self, data: zmtp.Data, expectation: Expectation) -> Judged:
        try:
            header = json.loads(data if isinstance(data, bytes | bytearray) else bytes(data))
        except (ValueError, RecursionError):
            return Judged(None, ("not_json", "the header frame is not JSON"), 0)
        if not isinstance(header, dict):
            return Judged(None, ("not_json", "the header frame is not a JSON object"), 0)
        if header.get("model_request"):
            return Judged(header, None, 0)
        if header.get("model_data"):
            return Judged(header, None, self._upload_limit(header, expectation))
        state = expectation.state
        served = state.served = state.served or self._choice(state.key, header)
        if served is None:
            unserved = (
                "no_model",
                "send the model request first (model_request): this server serves "
                + (", ".join(s.model.name for s in self.visible(state.key)) or "no detector"),
            )
            return Judged(header, unserved, 0)
        problem = self._frame_problem(served, header)
        if problem is not None:
            return Judged(header, problem, 0)
        return Judged(header, None, math.prod(header["shape"]) * np.dtype(header["dtype"]).itemsize)

    def _upload_limit(self, header: dict[str, Any], expectation: Expectation) -> int:
        """The model file's limit, once the upload may be taken (it is then counted as its
        peer's until it is answered); else 0, and why."""
        if expectation.holds_upload:
            return self.upload_limit
        key = expectation.state.key
        why = self._upload_problem(header.get("model_name"), key)
        if why is not None:
            expectation.upload_refusal = why
            return 0
        self.arriving[key] = self.arriving.get(key, 0) + 1
        expectation.holds_upload = True
        return self.upload_limit

    def _upload_problem(self, name: object, key: str, counted: int = 0) -> str | None:
        """Why this peer's upload is not taken (None: it is). ``counted``: its own upload,
        among those arriving."""
        if self.uploads is None or self.upload is None:
            return "uploads are not taken here (npuctl serve --zmq-uploads FOLDER takes them)"
        if not isinstance(name, str) or not _plain_name(name):
            return "an upload is [header, the model file], its model_name a plain file name"
        if self.named(name, key) is not None:
            return f"{name} is served here already: an upload never replaces a served model"
        uploaded = [s for s in self.served if s.owner is not None]
        own = sum(s.owner == key for s in uploaded) + self.arriving.get(key, 0) - counted
        if own >= self.max_uploads:
            return (
                f"{key} has uploaded {own} models, its most (--max-uploads): restart the "
                "server to take others"
            )
        every = len(uploaded) + sum(self.arriving.values()) - counted
        if every >= self.max_uploads_total:
            return (
                f"the server holds {every} uploaded models, its most (--max-uploads-total): "
                "restart it to take others"
            )
        return None

    def release(self, expectation: Expectation) -> None:
        if expectation.holds_upload:
            expectation.holds_upload = False
            key = expectation.state.key
            self.arriving[key] -= 1
            if not self.arriving[key]:
                del self.arriving[key]

    def visible(self, key: str) -> list[Served]:
        """The detectors a peer may name: the served ones and its own uploads."""
        return [s for s in self.served if s.owner is None or s.owner == key]

    def _choice(self, key: str, header: dict[str, Any]) -> Served | None:
        """The detector for a frame of a connection that made no model request: the one its
        peer chose last (its REQ socket reconnected), else the only one it may name, else
        the only one whose input the frame fits."""
        visible = self.visible(key)
        chosen = self.chosen.get(key)
        if chosen in visible:
            self.chosen.touch(key, chosen)
            return chosen
        if len(visible) == 1:
            return visible[0]
        fitting = [s for s in visible if self._frame_problem(s, header) is None]
        return fitting[0] if len(fitting) == 1 else None

    def _choose(self, state: PeerState, served: Served) -> None:
        state.served = served
        self.chosen[state.key] = served
        self.chosen.touch(state.key, served)

    def _frame_problem(self, served: Served, header: dict[str, Any]) -> tuple[str, str] | None:
        expected = served.facts.model_type
        model_type = header.get("model_type")
        if model_type not in (expected, MODEL_TYPE_VALUES.get(expected, expected)):
            return (
                "wrong_model_type",
                f"{served.model.name} is model_type {expected}, not {str(model_type)[:40]!r}: "
                f"set Frigate's model.model_type to {MODEL_TYPE_VALUES.get(expected, expected)}",
            )
        if header.get("dtype") not in ("uint8", "float32"):
            return (
                "wrong_dtype",
                f"dtype {str(header.get('dtype'))[:20]!r}: send uint8 (input_dtype: int) or "
                "float32 (input_dtype: float)",
            )
        shape = header.get("shape")
        shapes = served.frame_shapes()
        if not _is_shape(shape) or tuple(shape) not in shapes:
            ours = served.layout
            return (
                "wrong_shape",
                f"shape {zmtp.escaped(json.dumps(shape), 60)}: {served.model.name} takes "
                f"{list(ours)} "
                f"({served.facts.input_tensor}; set Frigate's model width, height and "
                "input_tensor to match)",
            )
        return None

    def named(self, name: object, key: str) -> Served | None:
        """The detector Frigate's model name means for this peer: a served one, else its
        own upload."""
        if not isinstance(name, str):
            return None
        return next((s for s in self.visible(key) if s.answers_to(name)), None)

    # -- a peer ----------------------------------------------------------------------------
    async def serve_peer(self, peer: zmtp.Peer) -> None:
        state = PeerState(client_key(peer.client))
        while True:
            expectation = Expectation(self, state)
            envelope: list[zmtp.Data] = [b""] if peer.peer_type == b"REQ" else []
            try:
                frames = await peer.message(expectation.limit)
                envelope, body = expectation.body(frames)
                reply = await self._answer(peer, state, body, expectation)
            except zmtp.Refused as refused:
                envelope = refused.envelope or envelope
                reply = self._refusal(peer, expectation, refused)
            except (zmtp.ProtocolError, ConnectionError, asyncio.IncompleteReadError):
                raise
            except Exception as error:  # a bug: one answer and one line, the peer served on
                reply = self._complaint(
                    peer, "internal", f"{type(error).__name__}: {error}", code=500
                )
            finally:
                self.release(expectation)
            await peer.send([*envelope, reply])
            await asyncio.sleep(0)  # the next message waits for every other peer's turn

    async def _answer(
        self, peer: zmtp.Peer, state: PeerState, body: list[zmtp.Data], expectation: Expectation
    ) -> bytes:
        if not body:  # nothing a client sends: a flood of them costs its connection
            raise zmtp.ProtocolError("an empty message")
        judged = expectation.judge(body[0])
        header = judged.header
        if header is None:
            return self._complaint(peer, *(judged.problem or ("not_json", "no header")))
        if header.get("model_request"):
            return await self._model_request(peer, state, header)
        if header.get("model_data"):
            return await self._model_data(peer, state, header, body, expectation)
        if judged.problem is not None:
            return self._complaint(peer, *judged.problem)
        if len(body) != 2:
            return self._complaint(peer, "no_tensor", "a frame is [header, tensor]")
        served = state.served
        assert served is not None  # judge() saw to it
        return await self._detect(peer, state, served, header, body[1])

    def _refusal(self, peer: zmtp.Peer, expectation: Expectation, refused: zmtp.Refused) -> bytes:
        if expectation.fault is not None:
            return self._complaint(peer, "internal", expectation.fault, code=500)
        judged = expectation.judged[1] if expectation.judged else Judged(None, None, 0)
        header = judged.header or {}
        if header.get("model_data"):
            why = expectation.upload_refusal or (
                f"the model file is over {self.upload_limit} bytes (--max-model-upload)"
            )
            self.complaints.say(peer.client, "upload_refused", why)
            return _json({"model_saved": False, "model_loaded": False, "error": why})
        kind, message = judged.problem or (refused.kind, str(refused))
        return self._complaint(peer, kind, message)

    def _complaint(self, peer: zmtp.Peer, kind: str, message: str, code: int = 400) -> bytes:
        self.complaints.say(peer.client, kind, message)
        self.service.metrics.errors.labels("internal" if code == 500 else "invalid_request").inc()
        self.service.metrics.answered("zmq", code, 0.0)
        return _json({"error": message, "kind": kind})

    async def _model_request(
        self, peer: zmtp.Peer, state: PeerState, header: dict[str, Any]
    ) -> bytes:
        name = header.get("model_name")
        served = self.named(name, state.key)
        if served is None:
            if self.complaints.now_and_then(peer.client, "asked"):
                log.info(
                    "frigate: %s asked for %s, which is not served here (%s)",
                    peer.client,
                    zmtp.escaped(json.dumps(name), 100),
                    ", ".join(s.model.name for s in self.visible(state.key)) or "no detector",
                )
            return _json({"model_available": False, "model_loaded": False})
        self._choose(state, served)
        loaded = await self._loaded()
        if self.complaints.now_and_then(peer.client, "connected for " + served.model.name):
            log.info("frigate: %s connected for %s", peer.client, served.model.name)
        return _json({"model_available": True, "model_loaded": loaded})

    async def _loaded(self) -> bool:
        try:
            async with asyncio.timeout(HANDSHAKE_WAIT):
                await self.service.models_loaded()
        except (TimeoutError, ApiError):
            return False
        return True

    async def _detect(
        self,
        peer: zmtp.Peer,
        state: PeerState,
        served: Served,
        header: dict[str, Any],
        data: zmtp.Data,
    ) -> bytes:
        started = time.perf_counter()
        shape = tuple(header["shape"])
        expected = math.prod(shape) * np.dtype(header["dtype"]).itemsize
        if len(data) != expected:
            return self._complaint(
                peer, "wrong_size", f"the tensor has {len(data)} bytes; its header says {expected}"
            )
        model, service = served.model, self.service

        def prepared() -> tuple[list[np.ndarray], object]:
            frame = np.frombuffer(data, dtype=header["dtype"]).reshape(shape)
            return model.frame(_pixels(frame, served, shape))  # type: ignore[attr-defined]

        try:
            await service.models_loaded()
            # Converting floats or transposing a frame takes up to 150 ms: not on the loop. A
            # frame as the model takes it is used as it is, without the thread's hand-over.
            as_taken = np.dtype(header["dtype"]) == np.uint8 and not served.frame_shapes()[shape]
            tensors, context = prepared() if as_taken else await asyncio.to_thread(prepared)
            async with self._turn(state.key):
                outputs, work = await service.infer(model.key, tensors)
        except ApiError as error:
            return self._complaint(peer, error.kind, str(error))
        finished = time.perf_counter()
        found = pipeline.detections(service, model, outputs, context, MIN_SCORE, ROWS)
        height, width = (
            (served.layout[2], served.layout[3])
            if served.facts.input_tensor == "nchw"
            else (served.layout[1], served.layout[2])
        )
        answer = detection_rows(found, width, height)
        answered = time.perf_counter()
        service.answered(model, work, answered - finished)
        service.metrics.answered("zmq", 200, answered - started)
        return answer

    @contextlib.asynccontextmanager
    async def _turn(self, key: str) -> AsyncIterator[None]:
        """At most frames_per_peer frames of a peer (an address, an IPv6 /64) in the NPU's
        queue: its other connections' frames wait here, so the queue takes the peers in turn
        (thirty-two connections from one address get the NPU as often as Frigate's few)."""
        if key not in self.turns:
            # One frame per NPU owner and one more keeps every owner busy for a Frigate with
            # a detector per core (all from one address) without gaps between its frames.
            self.turns[key] = (asyncio.Semaphore(len(self.service.owner.runtimes) + 1), 0)
        turn, waiting = self.turns[key]
        self.turns[key] = (turn, waiting + 1)
        try:
            async with turn:
                yield
        finally:
            lock, waiting = self.turns[key]
            if waiting == 1:
                del self.turns[key]
            else:
                self.turns[key] = (lock, waiting - 1)

    # -- uploads ---------------------------------------------------------------------------
    async def _model_data(
        self,
        peer: zmtp.Peer,
        state: PeerState,
        header: dict[str, Any],
        body: list[zmtp.Data],
        expectation: Expectation,
    ) -> bytes:
        name = str(header.get("model_name") or "")
        why = expectation.upload_refusal
        if why is None and not expectation.holds_upload:  # no model file came to claim it
            why = self._upload_problem(name, state.key) or "an upload is [header, the model file]"
        if why is None and len(body) != 2:
            why = "an upload is [header, the model file], and nothing after it"
        if why is not None or self.uploads is None or self.upload is None:
            why = why or "uploads are not taken here"
            self.complaints.say(peer.client, "upload_refused", why)
            return _json({"model_saved": False, "model_loaded": False, "error": why})
        try:
            async with asyncio.timeout(UPLOAD_WAIT):
                await self.proving.acquire()
        except TimeoutError:
            why = f"another upload was being proven for {UPLOAD_WAIT:g} s: send it again"
            self.complaints.say(peer.client, "upload_refused", why)
            return _json({"model_saved": False, "model_loaded": False, "error": why})
        try:
            # Its own twin may have been proven meanwhile.
            why = self._upload_problem(name, state.key, counted=1)
            if why is not None:
                self.complaints.say(peer.client, "upload_refused", why)
                return _json({"model_saved": False, "model_loaded": False, "error": why})
            return await self._prove(peer, state, name, body[1], self.uploads, self.upload)
        finally:
            self.proving.release()

    async def _prove(
        self,
        peer: zmtp.Peer,
        state: PeerState,
        name: str,
        model_file: zmtp.Data,
        uploads: Path,
        upload: Any,
    ) -> bytes:
        digest = await asyncio.to_thread(lambda: hashlib.sha256(model_file).hexdigest())
        record: dict[str, object] = {
            "name": name,
            "bytes": len(model_file),
            "sha256": digest,  # 64 MB hashed beside the event loop, not on it
            "peer": peer.client,
            "owner": state.key,
            "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        path = uploads / owner_folder(state.key) / name
        try:
            await asyncio.to_thread(_save, path, model_file)
            # Its name on the NPU is its owner's: two peers may upload the same name.
            model, facts = await asyncio.to_thread(upload, f"{name}@{state.key}", path)
            await self._warm(model)
        except (NpuctlError, OSError, ApiError) as error:
            record.update(loaded=False, error=str(error))
            self._record(record)
            path.unlink(missing_ok=True)  # unproven: not kept
            if self.complaints.now_and_then(peer.client, "uploaded"):
                log.warning(
                    "frigate: %s uploaded %s (%d bytes): not served, deleted: %s",
                    peer.client,
                    zmtp.escaped(name),
                    len(model_file),
                    zmtp.escaped(error, 400),
                )
            return _json({"model_saved": False, "model_loaded": False, "error": str(error)})
        served = Served(model, facts, owner=state.key, name=name)
        self.served.append(served)
        self._choose(state, served)
        record.update(loaded=True)
        self._record(record)
        log.info(
            "frigate: %s uploaded %s (%d bytes): proven, loaded and served to %s",
            peer.client,
            zmtp.escaped(name),
            len(model_file),
            state.key,
        )
        return _json({"model_saved": True, "model_loaded": True})

    async def _warm(self, model: ServedModel) -> None:
        """The uploaded model's first answer, through the queue like any frame: it loads on
        the NPU owner, and its golden answer is kept for /ready."""
        service = self.service
        outputs, _ = await service.infer(model.key, model.golden()[0])
        service.adopt(model, outputs)

    def _record(self, record: dict[str, object]) -> None:
        self.uploaded = [*self.uploaded[-(KEPT_RECORDS - 1) :], record]
        folder = self.service.runtime_folder
        if folder is None:
            return
        try:
            text = json.dumps(self.uploaded, indent=1) + "\n"
            write_text_atomically(folder / FRIGATE_UPLOADS_RECORD, text)
        except OSError as error:
            log.warning("frigate: cannot record the upload for npuctl doctor: %s", error)


def _plain_name(name: str) -> bool:
    """A file name of its own (printable, no folder, not hidden), fit for the uploads folder."""
    return 0 < len(name) < 256 and name.isprintable() and "/" not in name and name[0] != "."


OWNER_PREFIX = "from-"  # the uploads folder's folder for each owner


def owner_folder(key: str) -> str:
    """The uploads folder's folder for an owner's files (an IPv6 /64's slash made a dash)."""
    return OWNER_PREFIX + key.replace("/", "-")


def forget_earlier_uploads(folder: Path) -> int:
    """The files an earlier run took removed (each owner's folder): an upload is served for
    the run that proved it, and its owner uploads it again when told it is not here. Other
    files in the folder are left alone. How many were removed."""
    removed = 0
    try:
        owners = [p for p in folder.iterdir() if p.is_dir() and p.name.startswith(OWNER_PREFIX)]
    except FileNotFoundError:
        return 0
    for owner in owners:
        for file in owner.iterdir():
            if file.is_file() or file.is_symlink():
                file.unlink()
                removed += 1
    return removed


def _is_shape(shape: object) -> TypeGuard[list[int]]:
    """A tensor's shape as JSON gives it: a list of non-negative integers."""
    return isinstance(shape, list) and all(
        type(size) is int and 0 <= size < 1 << 31 for size in shape
    )


def _save(path: Path, data: zmtp.Data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)

    def write(temporary: Path) -> None:
        temporary.write_bytes(data)

    write_atomically(path, write)


def _pixels(frame: np.ndarray, served: Served, shape: tuple[int, ...]) -> np.ndarray:
    """The frame as uint8 pixels in the model's layout: as it is where it already is (no
    copy), transposed where Frigate sent the other layout, scaled where it sent floats (0..1
    as input_dtype: float sends them; 0..255 where any value is above 1)."""
    if served.frame_shapes()[shape]:
        order = (0, 3, 1, 2) if served.facts.input_tensor == "nchw" else (0, 2, 3, 1)
        frame = np.ascontiguousarray(frame.transpose(order))
    if frame.dtype == np.uint8:
        return frame
    scale = 255.0 if float(frame.max(initial=0.0)) <= 1.0 else 1.0
    return np.clip(np.rint(frame * scale), 0, 255).astype(np.uint8)


# -- listening -----------------------------------------------------------------------------
@dataclass
class Listeners:
    listening: list[zmtp.Listening]

    def where(self) -> str:
        return " and ".join(item.where() for item in self.listening)

    async def close(self) -> None:
        await asyncio.gather(*(item.close() for item in self.listening))


def _peer_limits(detector: FrigateDetector) -> zmtp.PeerLimits:
    limits, budget = detector.service.limits, detector.service.budget
    largest = detector.largest_frame() + HEADER_MAX
    arriving = limits.max_partial_frames or min(
        budget.bodies if budget is not None else 0, DEFAULT_PARTIAL_FRAMES
    )
    return zmtp.PeerLimits(
        limits.head_timeout,
        limits.body_timeout,
        MAX_FRAMES,
        limits.send_timeout,
        largest,
        zmtp.LargeFrames(max(arriving, largest)),  # always room for one of the largest
    )


async def start(startup: Startup) -> Running | None:
    endpoints = [zmtp.Endpoint.parse(text) for text in startup.options["zmq_endpoints"]]
    if not endpoints:
        return None
    detector = FrigateDetector(startup)
    service, limits = startup.service, startup.service.limits
    peer_limits = _peer_limits(detector)
    allow = detector.allow

    def allowed(client: str) -> bool:
        if client == "unix" or not allow:
            return True
        try:
            address = ipaddress.ip_address(client)
        except ValueError:
            return False
        return any(address in network for network in allow)

    def refused(client: str, why: str) -> None:
        detector.complaints.say(client, "refused", why, why=" ".join(why.split()[:2]))
        kind = "busy" if "connections" in why else "invalid_request"
        service.metrics.errors.labels("evicted" if "evicted" in why else kind).inc()

    group = npu_group(service.platform)
    listening = []
    try:
        for endpoint in endpoints:
            budget = Budget(limits.max_connections, limits.max_per_client)
            listening.append(
                await zmtp.listen(
                    endpoint, detector.serve_peer, peer_limits, budget, allowed, refused, group
                )
            )
    except OSError as error:
        for item in listening:
            await item.close()
        raise NpuctlError(
            f"cannot listen on {endpoint.text}: {error.strerror or error} (choose another --zmq)"
        ) from None
    for item, endpoint in zip(listening, endpoints, strict=True):
        if not endpoint.loopback:
            who = ", ".join(str(n) for n in allow) if allow else "every address that reaches it"
            log.warning(
                "frigate: %s takes frames unauthenticated (Frigate's client sends no credentials), "
                "reachable from %s%s",
                item.where(),
                who,
                "" if allow else ": give --zmq-allow, or a NetworkPolicy on K3s",
            )
    for served in detector.served:
        facts = served.facts
        log.info(
            "frigate: %s answers to model.path %s: model_type %s, input_tensor %s, "
            "input_pixel_format %s, labelmap_path %s",
            served.model.name,
            " or ".join(sorted({served.model.name, *facts.names})),
            MODEL_TYPE_VALUES.get(facts.model_type, facts.model_type),
            facts.input_tensor,
            facts.input_pixel_format,
            facts.labelmap,
        )
    return Listeners(listening)


def npu_group(platform: str) -> str | None:
    """The group the platform's driver packages give the NPU's device node to."""
    groups = {driver.group for driver in all_drivers() if driver.platform == platform}
    return groups.pop() if len(groups) == 1 else None


LISTENER = Listener("frigate", OPTIONS, start)
