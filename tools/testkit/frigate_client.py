"""What Frigate's zmq detector does (frigate/detectors/plugins/zmq_ipc.py in
blakeblackshear/frigate, restated with pyzmq as it uses it, without Frigate's configuration
classes): a REQ socket with the request timeout as its send and receive timeouts and linger
0; the model request at start, answered within 30 s, and the model file sent when the model
is not available; each frame as [header, tensor]; on a timeout or any ZeroMQ error a new
socket and the model request again, and zero detections for that frame; an answer of any
size but 480 bytes read as zero detections."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import zmq

ZERO = np.zeros((20, 6), np.float32)


@dataclass
class FrigateZmqClient:
    endpoint: str
    model_path: str  # Frigate's model.path: its file name is the model's name
    model_type: str = "ssd"  # Frigate's ModelTypeEnum name, sent in each frame's header
    request_timeout_ms: int = 200
    linger_ms: int = 0
    context: zmq.Context = field(default_factory=zmq.Context)
    model_ready: bool = False
    logged: list[str] = field(default_factory=list)  # what Frigate would log
    reconnects: int = 0

    def __post_init__(self) -> None:
        self.socket: zmq.Socket | None = None
        self._create_socket()
        self.model_name = Path(self.model_path).name
        self._initialize_model()

    def _create_socket(self) -> None:
        if self.socket is not None:
            self.socket.close(linger=self.linger_ms)
        self.socket = self.context.socket(zmq.REQ)
        self.socket.setsockopt(zmq.RCVTIMEO, self.request_timeout_ms)
        self.socket.setsockopt(zmq.SNDTIMEO, self.request_timeout_ms)
        self.socket.setsockopt(zmq.LINGER, self.linger_ms)
        self.socket.connect(self.endpoint)

    def _initialize_model(self) -> None:
        try:
            self.model_ready = self._check_and_transfer_model()
        except Exception as error:  # as Frigate: logged, the detector stays not ready
            self.logged.append(f"Failed to initialize model: {error}")
            self.model_ready = False

    def _ask(self, frames: list[bytes]) -> list[bytes]:
        """A request with the 30 s Frigate gives the model's handshake and upload."""
        assert self.socket is not None
        self.socket.send_multipart(frames)
        original = self.socket.getsockopt(zmq.RCVTIMEO)
        self.socket.setsockopt(zmq.RCVTIMEO, 30000)
        try:
            return self.socket.recv_multipart()
        finally:
            self.socket.setsockopt(zmq.RCVTIMEO, original)

    def _check_and_transfer_model(self) -> bool:
        header = {"model_request": True, "model_name": self.model_name}
        response_frames = self._ask([json.dumps(header).encode()])
        if len(response_frames) != 1:
            self.logged.append("Received unexpected response format for model availability")
            return False
        response = json.loads(response_frames[0].decode())
        if response.get("model_available") and response.get("model_loaded"):
            return True
        if response.get("model_available"):
            self.logged.append("Model exists but failed to load")
            return False
        return self._send_model_data()

    def _send_model_data(self) -> bool:
        if not Path(self.model_path).exists():
            self.logged.append(f"Model file not found: {self.model_path}")
            return False
        model_data = Path(self.model_path).read_bytes()
        header = {"model_data": True, "model_name": self.model_name}
        response_frames = self._ask([json.dumps(header).encode(), model_data])
        response = json.loads(response_frames[0].decode())
        saved, loaded = response.get("model_saved", False), response.get("model_loaded", False)
        if not (saved and loaded):
            self.logged.append(f"Model transfer failed: saved={saved}, loaded={loaded}")
        return bool(saved and loaded)

    def _decode_response(self, frames: list[bytes]) -> np.ndarray:
        if len(frames) == 1:
            if len(frames[0]) != 20 * 6 * 4:
                self.logged.append(f"unexpected payload size: {len(frames[0])}")
                return ZERO
            return np.frombuffer(frames[0], dtype=np.float32).reshape((20, 6))
        if len(frames) >= 2:
            header = json.loads(frames[0].decode())
            dtype = np.dtype(header.get("dtype", "float32"))
            return np.frombuffer(frames[1], dtype=dtype).reshape(tuple(header.get("shape", [])))
        self.logged.append("ZMQ detector received empty reply")
        return ZERO

    def detect_raw(self, tensor_input: np.ndarray) -> np.ndarray:
        if not self.model_ready:
            self.logged.append("Model not ready, returning zero detections")
            return ZERO
        header = {
            "shape": list(tensor_input.shape),
            "dtype": str(tensor_input.dtype.name),
            "model_type": self.model_type,
        }
        assert self.socket is not None
        try:
            self.socket.send_multipart(
                [json.dumps(header).encode(), memoryview(tensor_input.tobytes(order="C"))]
            )
            return self._decode_response(self.socket.recv_multipart())
        except zmq.ZMQError as error:  # zmq.Again, a timeout, too: a new socket, a handshake
            self.logged.append(f"ZMQ detector: {error}; resetting socket")
            self.reconnects += 1
            self._create_socket()
            self._initialize_model()
            return ZERO

    def close(self) -> None:
        if self.socket is not None:
            self.socket.close(linger=self.linger_ms)
        self.context.term()


def detections(rows: np.ndarray, labels: dict[int, str], threshold: float = 0.4) -> list[tuple]:
    """What Frigate makes of the rows (frigate/object_detection/base.py: detect): label, score,
    box, stopping at the first row under the threshold; an unknown class id is skipped."""
    found = []
    for row in rows:
        if int(row[0]) < 0 or int(row[0]) >= len(labels):
            continue
        if row[1] < threshold:
            break
        found.append((labels[int(row[0])], float(row[1]), tuple(float(v) for v in row[2:])))
    return found
