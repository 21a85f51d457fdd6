"""ctypes binding of libnoe, and of Arm China's libaipudrv, the same API under the prefix
aipu_ (abi.Dialect names what differs): one place for every C detail and every crash guard.

Guards, each from a verified behaviour of the real library:
* it is not thread-safe: every call goes through one process-wide lock;
* ``noe_create_job`` dereferences its config unconditionally: a zeroed config is always
  passed, never NULL;
* ids are 64-bit (a graph id is > 0xFFFFFFFF): they are never truncated;
* ``noe_get_target`` and the version ioctl write strings without a terminating NUL: zeroed
  buffers larger than the text are passed;
* the context is deinitialised exactly once, also on errors and Ctrl-C;
* its "[UMD ERR]" log lines are silenced through the exported UMD_LOG_LEVEL.
A model file that could crash the library is loaded in a child process first
(see ``isolation``); that guard is the caller's choice, because it costs a second load.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from npuctl.errors import InputError, NpuctlError, NpuError

from ..user_space import library_version
from ..versions import series
from . import abi

if TYPE_CHECKING:
    from ctypes import _Pointer

    ContextPointer = _Pointer[abi.ContextHandle]

# libnoe keeps global state; one lock for the whole process, re-entrant for nested helpers.
_LOCK = threading.RLock()

_c = ctypes
_CTX = _c.POINTER(abi.ContextHandle)
_STATUS = _c.c_uint32

# function (without the dialect's prefix) -> argument types; every one returns a status.
_PROTOTYPES: dict[str, list] = {
    "init_context": [_c.POINTER(_CTX)],
    "deinit_context": [_CTX],
    "get_error_message": [_CTX, _STATUS, _c.POINTER(_c.c_char_p)],
    "load_graph": [_CTX, _c.c_char_p, _c.POINTER(_c.c_uint64), _c.POINTER(abi.GraphConfig)],
    "unload_graph": [_CTX, _c.c_uint64],
    "get_tensor_count": [_CTX, _c.c_uint64, _c.c_uint32, _c.POINTER(_c.c_uint32)],
    "get_tensor_descriptor": [
        _CTX,
        _c.c_uint64,
        _c.c_uint32,
        _c.c_uint32,
        _c.POINTER(abi.TensorDesc),
    ],
    "create_job": [_CTX, _c.c_uint64, _c.POINTER(_c.c_uint64), _c.POINTER(abi.JobConfig)],
    "load_tensor": [_CTX, _c.c_uint64, _c.c_uint32, _c.c_void_p],
    "infer": [_CTX, _c.c_uint64, _c.c_int32],  # the dialect's: noe_job_infer_sync, ...
    "get_tensor": [_CTX, _c.c_uint64, _c.c_uint32, _c.c_uint32, _c.c_void_p],
    "clean_job": [_CTX, _c.c_uint64],
    "get_partition_count": [_CTX, _c.POINTER(_c.c_uint32)],
    "get_cluster_count": [_CTX, _c.c_uint32, _c.POINTER(_c.c_uint32)],
    "get_core_count": [_CTX, _c.c_uint32, _c.c_uint32, _c.POINTER(_c.c_uint32)],
    "get_target": [_CTX, _c.c_char_p],
    "ioctl": [_CTX, _c.c_uint32, _c.c_uint32, _c.c_void_p],  # with ioctl_device
}
_IOCTL_WITHOUT_DEVICE = [_CTX, _c.c_uint32, _c.c_void_p]


def symbol(dialect: abi.Dialect, function: str) -> str:
    """The exported name of one of _PROTOTYPES' functions in a dialect."""
    return f"{dialect.prefix}_{dialect.infer if function == 'infer' else function}"


REQUIRED_SYMBOLS = tuple(symbol(abi.LIBNOE, function) for function in _PROTOTYPES)


class Functions:
    """A library's functions by their dialect-free names, prototypes declared."""

    def __init__(self, lib: ctypes.CDLL, dialect: abi.Dialect) -> None:
        for function, argtypes in _PROTOTYPES.items():
            bound = getattr(lib, symbol(dialect, function))
            if function == "ioctl" and not dialect.ioctl_device:
                argtypes = _IOCTL_WITHOUT_DEVICE
            bound.argtypes = argtypes
            bound.restype = _STATUS
            setattr(self, function, bound)

    def __getattr__(self, name: str) -> Callable[..., int]:  # each is set in __init__
        raise AttributeError(name)


@dataclass(frozen=True)
class TensorInfo:
    """A tensor descriptor; there is no shape in the C API, only a byte size."""

    index: int
    id: int
    size: int
    scale: float
    zero_point: int
    data_type: int

    @functools.cached_property
    def dtype(self) -> np.dtype:  # asked for at every load and output: looked up once
        return abi.numpy_dtype(self.data_type)

    @property
    def count(self) -> int:
        return self.size // self.dtype.itemsize

    @property
    def type_name(self) -> str:
        try:
            return abi.DataType(self.data_type).name
        except ValueError:
            return f"0x{self.data_type:X}"

    def as_dict(self) -> dict[str, object]:
        return {
            "index": self.index,
            "size": self.size,
            "dtype": self.type_name,
            "elements": self.count,
            "scale": self.scale,
            "zero_point": self.zero_point,
        }


def quantize(values: np.ndarray, info: TensorInfo) -> np.ndarray:
    """Real values to the tensor's type: q = clip(round(f * scale - zero_point))."""
    dtype = info.dtype
    if dtype.kind == "f":
        return np.asarray(values, dtype=dtype)
    limits = np.iinfo(dtype)
    scaled = np.rint(np.asarray(values, dtype=np.float32) * info.scale - info.zero_point)
    return np.clip(scaled, limits.min, limits.max).astype(dtype)


def dequantize(raw: np.ndarray, info: TensorInfo) -> np.ndarray:
    """The tensor's values as float32: f = (q + zero_point) / scale."""
    if info.dtype.kind == "f":
        return raw.astype(np.float32)
    scale = info.scale if info.scale else 1.0
    values = raw.astype(np.float32)  # a fresh array: the arithmetic below reuses it
    values += info.zero_point
    values /= scale
    return values


class NoeLibrary:
    """The loaded user-mode driver (CIX's libnoe or Arm China's libaipudrv: the dialect is
    the one whose functions it exports) with its prototypes declared."""

    def __init__(self, path: str | Path = abi.DEFAULT_LIBRARY) -> None:
        self.path = Path(path)
        if not self.path.exists():
            raise NpuError(
                f"libnoe not found at {self.path}: install CIX's cix-noe-umd "
                "package ('npuctl provision --umd-deb FILE') or pass --library"
            )
        try:
            self.lib = ctypes.CDLL(str(self.path))
        except OSError as error:
            raise NpuError(
                f"cannot load {self.path}: {error} (it needs glibc >= 2.34 and "
                "libstdc++ with GLIBCXX_3.4.29: Debian 12 / Ubuntu 22.04 or newer)"
            ) from error
        self.dialect = next(
            (d for d in abi.DIALECTS if hasattr(self.lib, symbol(d, "init_context"))), abi.LIBNOE
        )
        self.missing = [
            symbol(self.dialect, function)
            for function in _PROTOTYPES
            if not hasattr(self.lib, symbol(self.dialect, function))
        ]
        if self.missing:
            raise NpuError(
                f"{self.path} lacks {', '.join(self.missing)}: not a libnoe this npuctl supports"
            )
        self.api = Functions(self.lib, self.dialect)
        # Learned before any command: the command numbers are the version's.
        self.version = library_version(self.path)
        self._silence()

    def command(self, name: str) -> int:
        """The number of the ``*_ioctl`` command ``name`` in this library's version; an error
        naming the versions npuctl knows when it does not know this one."""
        # A version without major.minor ('cix-noe-umd 3.1.3') is a known unknown, not none.
        number = self.dialect.command(series(self.version) or self.version, name)
        if number is None:
            known = ", ".join(self.dialect.known_series())
            raise NpuError(
                f"{self.dialect.library} {self.version or 'of unknown version'} ({self.path}): "
                f"npuctl knows its {name} command in {self.dialect.library} {known} only, and "
                "sends none to another version, where that number is another command "
                f"(install {self.dialect.package}, or use a file named with its version, "
                f"{self.dialect.library}.so.X.Y.Z)"
            )
        return number

    def _silence(self) -> None:
        with contextlib.suppress(ValueError):  # older builds do not export it
            ctypes.c_int.in_dll(self.lib, "UMD_LOG_LEVEL").value = -1

    def message(self, context: ContextPointer | None, status: int) -> str:
        text = _c.c_char_p()
        with _LOCK:
            self.api.get_error_message(context, status, _c.byref(text))
        message = text.value.decode(errors="replace").strip() if text.value else ""
        return message or abi.status_text(status)

    def error(
        self,
        context: ContextPointer | None,
        what: str,
        status: int,
        error_type: type[NpuctlError] = NpuError,
    ) -> NpuctlError:
        detail = self.message(context, status)
        text = f"{what} failed: {abi.status_name(status)} (0x{status:X})"
        error = error_type(f"{text}: {detail}" if detail else text)
        error.status = status  # type: ignore[attr-defined]
        return error


class Session:
    """An NPU context. ``with Session(lib) as npu:``; deinitialised exactly once."""

    def __init__(self, library: NoeLibrary) -> None:
        self.library = library
        self.lib = library.api  # the functions by their dialect-free names
        self._context: ContextPointer | None = None

    def __enter__(self) -> Session:
        self.open()
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def open(self) -> None:
        context = _CTX()
        with _LOCK:
            status = self.lib.init_context(_c.byref(context))
        if status != 0 or not context:
            raise self.library.error(None, f"opening the NPU ({self.name('init_context')})", status)
        self._context = context

    def close(self) -> None:
        context, self._context = self._context, None
        if context:
            with _LOCK:
                self.lib.deinit_context(context)

    @property
    def context(self) -> ContextPointer:
        if not self._context:
            raise NpuError("the NPU context is closed")
        return self._context

    def _check(self, status: int, what: str) -> None:
        if status != 0:
            raise self.library.error(self._context, what, status)

    def name(self, function: str) -> str:
        """A function's name as the library exports it, for messages."""
        return symbol(self.library.dialect, function)

    # -- facts about the NPU ----------------------------------------------------------
    def topology(self) -> dict[str, int]:
        partitions = _c.c_uint32()
        clusters = _c.c_uint32()
        cores = _c.c_uint32()
        with _LOCK:
            self._check(
                self.lib.get_partition_count(self.context, _c.byref(partitions)),
                self.name("get_partition_count"),
            )
            self._check(
                self.lib.get_cluster_count(self.context, 0, _c.byref(clusters)),
                self.name("get_cluster_count"),
            )
            self._check(
                self.lib.get_core_count(self.context, 0, 0, _c.byref(cores)),
                self.name("get_core_count"),
            )
        return {"partitions": partitions.value, "clusters": clusters.value, "cores": cores.value}

    def target(self) -> str:
        buffer = _c.create_string_buffer(64)  # zeroed; the library writes no NUL
        with _LOCK:
            self._check(self.lib.get_target(self.context, buffer), self.name("get_target"))
        return buffer.value.decode(errors="replace")

    def versions(self) -> dict[str, str]:
        version = abi.DriverVersion()
        dialect = self.library.dialect
        device = (abi.DEVICE_NPU,) if dialect.ioctl_device else ()
        command = self.library.command("GET_VERSION")
        with _LOCK:
            self._check(
                self.lib.ioctl(self.context, *device, command, _c.byref(version)),
                f"{self.name('ioctl')}(GET_VERSION)",
            )
        raw = bytes(version)
        return {
            "umd": raw[:16].split(b"\0")[0].decode(errors="replace"),
            "kmd": raw[16:].split(b"\0")[0].decode(errors="replace"),
        }

    # -- graphs and jobs ----------------------------------------------------------------
    @contextmanager
    def graph(self, path: Path) -> Iterator[Graph]:
        """Load a model file (validated by the caller) and unload it afterwards."""
        graph_id = _c.c_uint64()
        config_npu = abi.GraphConfigNpu()
        config = abi.GraphConfig(_c.pointer(config_npu))
        with _LOCK:
            status = self.lib.load_graph(
                self.context,
                str(path).encode(),
                _c.byref(graph_id),
                _c.byref(config) if self.library.dialect.configs else None,
            )
        if status != 0:
            from npuctl.errors import ModelError

            raise self.library.error(self._context, f"loading {path}", status, ModelError)
        graph = Graph(self, graph_id.value)
        try:
            yield graph
        finally:
            with _LOCK:
                if self._context:
                    self.lib.unload_graph(self._context, graph.id)


class Graph:
    def __init__(self, session: Session, graph_id: int) -> None:
        self.session = session
        self.id = graph_id
        # One zeroed job config (partition 0, QoS 0, DDR) for every job of this graph: the
        # library only reads it, and building it per job costs more than the rest of a job.
        self._job_config_npu = abi.JobConfigNpu()
        self._job_config = abi.JobConfig(_c.pointer(self._job_config_npu))
        self.inputs = self._tensors(abi.TensorType.INPUT)
        self.outputs = self._tensors(abi.TensorType.OUTPUT)

    def _tensors(self, kind: abi.TensorType) -> list[TensorInfo]:
        session = self.session
        count = _c.c_uint32()
        with _LOCK:
            session._check(
                session.lib.get_tensor_count(session.context, self.id, kind, _c.byref(count)),
                session.name("get_tensor_count"),
            )
            infos = []
            for index in range(count.value):
                desc = abi.TensorDesc()
                session._check(
                    session.lib.get_tensor_descriptor(
                        session.context, self.id, kind, index, _c.byref(desc)
                    ),
                    session.name("get_tensor_descriptor"),
                )
                infos.append(
                    TensorInfo(
                        index,
                        desc.id,
                        desc.size,
                        float(desc.scale),
                        desc.zero_point,
                        desc.data_type,
                    )
                )
        return infos

    @contextmanager
    def job(self) -> Iterator[Job]:
        session = self.session
        job_id = _c.c_uint64()
        with _LOCK:
            session._check(
                session.lib.create_job(
                    session.context,
                    self.id,
                    _c.byref(job_id),
                    _c.byref(self._job_config) if session.library.dialect.configs else None,
                ),
                session.name("create_job"),
            )
        job = Job(self, job_id.value)
        try:
            yield job
        finally:
            with _LOCK:
                if session._context:
                    session.lib.clean_job(session._context, job.id)


class Job:
    def __init__(self, graph: Graph, job_id: int) -> None:
        self.graph = graph
        self.session = graph.session
        self.id = job_id

    def load(self, index: int, data: np.ndarray) -> None:
        info = self.graph.inputs[index]
        array = np.ascontiguousarray(data, dtype=info.dtype)
        if array.nbytes != info.size:
            raise InputError(
                f"input {index} holds {array.nbytes} bytes, the model expects "
                f"{info.size} ({info.count} x {info.type_name})"
            )
        with _LOCK:
            self.session._check(
                self.session.lib.load_tensor(
                    self.session.context, self.id, index, array.ctypes.data
                ),
                f"{self.session.name('load_tensor')}({index})",
            )

    def infer(self, timeout_ms: int) -> None:
        with _LOCK:
            status = self.session.lib.infer(self.session.context, self.id, timeout_ms)
        if status == abi.TIMEOUT_STATUS:
            raise self.session.library.error(
                self.session._context, f"inference (timeout {timeout_ms} ms)", status
            )
        self.session._check(status, f"inference ({self.session.name('infer')})")

    def output(self, index: int) -> np.ndarray:
        info = self.graph.outputs[index]
        array = np.empty(info.count, dtype=info.dtype)
        with _LOCK:
            self.session._check(
                self.session.lib.get_tensor(
                    self.session.context,
                    self.id,
                    abi.TensorType.OUTPUT,
                    index,
                    array.ctypes.data,
                ),
                f"{self.session.name('get_tensor')}(output {index})",
            )
        return array
