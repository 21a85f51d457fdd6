"""libnoe's C ABI (UMD 0.6.0, aarch64 LP64): struct layouts, enums and status codes; and
where Arm China's libaipudrv, the same API under the prefix aipu_, differs (``Dialect``).

Verified against the real library; several community guides get the data types wrong
(S8 is 3 and S16 is 5; 1 is BOOL). The tensor descriptor, the data types and the status codes
npuctl acts on (3, 0x11, 0x23) are the same in libaipudrv 6.1.0's standard_api.h.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from enum import IntEnum

import numpy as np

from ..facts import DEFAULT_LIBRARY  # noqa: F401  (re-exported)


class ContextHandle(ctypes.Structure):
    _fields_ = [("handle", ctypes.c_uint32)]  # opaque; only pointers to it are used


class TensorDesc(ctypes.Structure):
    _fields_ = [
        ("id", ctypes.c_uint32),
        ("size", ctypes.c_uint32),  # bytes
        ("scale", ctypes.c_float),
        ("zero_point", ctypes.c_int32),
        ("data_type", ctypes.c_uint32),
    ]


class JobConfigNpu(ctypes.Structure):
    _fields_ = [
        ("misc", ctypes.c_uint32),  # all zero: partition 0, QoS 0, DDR regions
        ("fm_idxes", ctypes.POINTER(ctypes.c_int32)),
        ("fm_idxes_cnt", ctypes.c_int32),
        ("dynshape", ctypes.c_void_p),
    ]


class JobConfig(ctypes.Structure):
    _fields_ = [("conf_j_npu", ctypes.POINTER(JobConfigNpu))]


class GraphConfigNpu(ctypes.Structure):
    _fields_ = [
        ("misc", ctypes.c_uint32),
        ("wt_idxes", ctypes.POINTER(ctypes.c_int32)),
        ("wt_idxes_cnt", ctypes.c_int32),
        ("extra_weight_path", ctypes.c_char_p),
    ]


class GraphConfig(ctypes.Structure):
    _fields_ = [("conf_g_npu", ctypes.POINTER(GraphConfigNpu))]


class DriverVersion(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("umd_version", ctypes.c_char * 16), ("kmd_version", ctypes.c_char * 16)]


class TensorType(IntEnum):
    INPUT = 0
    OUTPUT = 1
    INTER_DUMP = 2
    PRINTF = 3
    PROFILER = 4
    LAYER_COUNTER = 5
    ERROR_CODE = 6
    OUT_TENSOR_SHAPE = 7


class DataType(IntEnum):
    NONE = 0
    BOOL = 1
    U8 = 2
    S8 = 3
    U16 = 4
    S16 = 5
    U32 = 6
    S32 = 7
    U64 = 8
    S64 = 9
    F16 = 0xA
    F32 = 0xB
    F64 = 0xC
    BF16 = 0xD
    ALIGNED_U4 = 0x12
    ALIGNED_S4 = 0x13
    ALIGNED_U12 = 0x14
    ALIGNED_S12 = 0x15
    COMPACT_U4 = 0x20
    COMPACT_S4 = 0x21
    COMPACT_U12 = 0x22
    COMPACT_S12 = 0x23


NUMPY_DTYPES: dict[DataType, np.dtype] = {
    DataType.BOOL: np.dtype(np.bool_),
    DataType.U8: np.dtype(np.uint8),
    DataType.S8: np.dtype(np.int8),
    DataType.U16: np.dtype(np.uint16),
    DataType.S16: np.dtype(np.int16),
    DataType.U32: np.dtype(np.uint32),
    DataType.S32: np.dtype(np.int32),
    DataType.U64: np.dtype(np.uint64),
    DataType.S64: np.dtype(np.int64),
    DataType.F16: np.dtype(np.float16),
    DataType.F32: np.dtype(np.float32),
    DataType.F64: np.dtype(np.float64),
}

DEVICE_NPU = 1


@dataclass(frozen=True)
class Dialect:
    """A Zhouyi user-mode driver's C API: the same functions under its prefix, but for these."""

    library: str  # what users call it
    package: str  # the Debian package that installs it
    prefix: str  # of every function: noe_init_context, aipu_init_context
    infer: str  # the function that runs a job and waits for it
    configs: bool  # load_graph and create_job dereference their configuration: pass one
    ioctl_device: bool  # *_ioctl takes a device before the command
    # The *_ioctl command numbers of each library series (major.minor): the command enum is
    # renumbered between releases, so a number means another command in another version.
    commands: tuple[tuple[str, tuple[tuple[str, int], ...]], ...]
    # The series a library whose version cannot be learned is taken to be; "" refuses it.
    assumed: str

    def known_series(self) -> list[str]:
        return [series for series, _ in self.commands]

    def command(self, series: str, name: str) -> int | None:
        """The number of ``name`` in the library ``series``; None when npuctl does not know."""
        numbers = dict(dict(self.commands).get(series or self.assumed, ()))
        return numbers.get(name)


# libnoe: NOE_IOCTL_GET_VERSION is 270 in UMD 0.6.0 and was 271 in 0.5.0. CIX's published
# libnoe.so carries no other version in its file name than the UMD's, and UMD 0.6.0 is the one
# published C library: a copy without a version in its name is taken as that one.
LIBNOE = Dialect(
    "libnoe", "cix-noe-umd", "noe", "job_infer_sync", True, True,
    (("0.6", (("GET_VERSION", 270),)), ("0.5", (("GET_VERSION", 271),))),
    "0.6",
)  # fmt: skip
# libaipudrv: its configurations default to NULL, its ioctl takes no device, and 6.1.0
# inserted AIPU_IOCTL_IS_DS into aipu_ioctl_cmd_t, so GET_VERSION is 272 in 6.0.0 and 273 in
# 6.1.0, where 6.0.0 has ABORT_CMDPOOL. A libaipudrv of unknown version gets no command.
LIBAIPUDRV = Dialect(
    "libaipudrv", "libaipudrv6", "aipu", "finish_job", False, False,
    (("6.0", (("GET_VERSION", 272),)), ("6.1", (("GET_VERSION", 273),))),
    "",
)  # fmt: skip
DIALECTS = (LIBNOE, LIBAIPUDRV)
TIMEOUT_STATUS = 0x23
JOB_EXCEPTION_STATUS = 0x11
OPEN_DEVICE_FAILED = 0x3

_STATUS_NAMES = {
    0x0: "SUCCESS",
    0x1: "NULL_PTR",
    0x2: "INVALID_CTX",
    0x3: "OPEN_DEV_FAIL",
    0x4: "DEV_ABNORMAL",
    0x5: "DEINIT_FAIL",
    0x6: "INVALID_CONFIG",
    0x7: "UNKNOWN_BIN",
    0x8: "GVERSION_UNSUPPORTED",
    0x9: "INVALID_GBIN",
    0xA: "TARGET_NOT_FOUND",
    0xB: "INVALID_GRAPH_ID",
    0xC: "OPEN_FILE_FAIL",
    0xD: "MAP_FILE_FAIL",
    0xE: "READ_FILE_FAIL",
    0xF: "WRITE_FILE_FAIL",
    0x10: "INVALID_JOB_ID",
    0x11: "JOB_EXCEPTION",
    0x12: "JOB_TIMEOUT",
    0x13: "OP_NOT_SUPPORTED",
    0x14: "INVALID_OP",
    0x15: "INVALID_SIZE",
    0x16: "BUF_ALLOC_FAIL",
    0x17: "BUF_FREE_FAIL",
    0x18: "INVALID_CORE_ID",
    0x19: "RESERVE_SRAM_FAIL",
    0x1A: "INVALID_TENSOR_ID",
    0x1B: "INVALID_CLUSTER_ID",
    0x1C: "INVALID_PARTITION_ID",
    0x1D: "PRINTF_FAIL",
    0x1E: "INVALID_TENSOR_TYPE",
    0x1F: "INVALID_GM",
    0x20: "INVALID_SEGMMU",
    0x21: "INVALID_QOS",
    0x22: "INVALID_TENSOR_CNT",
    0x23: "TIMEOUT",
    0x24: "NO_BATCH_QUEUE",
    0x25: "MARK_SHARED_TENSOR",
    0x26: "SET_SHARED_TENSOR",
    0x27: "DMABUF_SHARED_IO",
    0x28: "GET_SHAPE_FAILED",
    0x29: "SET_SHAPE_FAILED",
    0x30: "NOT_CONFIG_SHAPE",
    0x31: "UNMATCH_OUT_SHAPE",
    0x32: "ZERO_TENSOR_SIZE",
    0x33: "ALLOC_GRIP_ID",
    0x34: "ALLOC_GROUP_ID",
    0x35: "NOT_FOUND_IN_HASHTABLE",
    0x36: "INVALID_COREDUMP",
    0x37: "JOB_DISPATCH_FAIL",
    0x200: "UNKNOWN_ERROR",
    0x300: "KEYBOARD_INTERRUPT",
    0x301: "SYSTEM_ERR",
}

# Own text where the library gives none (it returns an empty message for these).
_STATUS_TEXT = {
    0x3: "cannot open /dev/aipu: check that the aipu module is loaded and that you may "
    "open the device",
    0x9: "the model file is not a valid graph binary",
    0x11: "the NPU reported an exception while running the job",
    0x12: "the job timed out",
    0x23: "the inference did not finish within the timeout",
    0x25: "marking a shared tensor failed",
    0x26: "setting a shared tensor failed",
    0x200: "unknown error inside the library",
}


def status_name(status: int) -> str:
    if status in _STATUS_NAMES:
        prefix = "NOE_STATUS_" if status == 0 else "NOE_STATUS_ERROR_"
        return prefix + _STATUS_NAMES[status]
    if 0x380 <= status <= 0x383:
        return "NOE_STATUS_ERROR_OUT_OF_SPEC"
    if 0x400 <= status <= 0x407:
        return "NOE_STATUS_ERROR_OUT_OF_RANGE"
    if 0x480 <= status <= 0x487:
        return "NOE_STATUS_ERROR_ARITHMETIC"
    return f"NOE_STATUS_0x{status:X}"


def status_text(status: int) -> str:
    return _STATUS_TEXT.get(status, "")


def numpy_dtype(data_type: int) -> np.dtype:
    try:
        return NUMPY_DTYPES[DataType(data_type)]
    except (ValueError, KeyError):
        raise ValueError(f"tensor data type 0x{data_type:X} has no numpy equivalent") from None
