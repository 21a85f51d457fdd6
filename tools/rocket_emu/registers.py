"""What the NPU was told to do: the NPU model's log of every job's register commands and of
the buffers each task read (patch 0011, -global rockchip-npu.regcmd-log), split into the
jobs each case ran under each Teflon (the board counts them, one interrupt a job, before and
after the case), decoded into named registers and compared between Teflons. Addresses differ
from run to run and are left out of the comparison; a buffer is compared by its digest."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

# The RK3588 NPU's registers that Mesa's rocket driver programs, by offset (the TRM's names,
# as Mesa's rkt_registers.h has them).
REGISTERS = {
    0x0008: "PC_OPERATION_ENABLE",
    0x0010: "PC_BASE_ADDRESS",
    0x0014: "PC_REGISTER_AMOUNTS",
    0x100C: "CNA_CONV_CON1",
    0x1010: "CNA_CONV_CON2",
    0x1014: "CNA_CONV_CON3",
    0x1020: "CNA_DATA_SIZE0",
    0x1024: "CNA_DATA_SIZE1",
    0x1028: "CNA_DATA_SIZE2",
    0x102C: "CNA_DATA_SIZE3",
    0x1030: "CNA_WEIGHT_SIZE0",
    0x1034: "CNA_WEIGHT_SIZE1",
    0x1038: "CNA_WEIGHT_SIZE2",
    0x1040: "CNA_CBUF_CON0",
    0x1044: "CNA_CBUF_CON1",
    0x104C: "CNA_CVT_CON0",
    0x1050: "CNA_CVT_CON1",
    0x1054: "CNA_CVT_CON2",
    0x1058: "CNA_CVT_CON3",
    0x105C: "CNA_CVT_CON4",
    0x1060: "CNA_FC_CON0",
    0x1064: "CNA_FC_CON1",
    0x1068: "CNA_PAD_CON0",
    0x1070: "CNA_FEATURE_DATA_ADDR",
    0x1074: "CNA_FC_CON2",
    0x1078: "CNA_DMA_CON0",
    0x107C: "CNA_DMA_CON1",
    0x1080: "CNA_DMA_CON2",
    0x1084: "CNA_FC_DATA_SIZE0",
    0x1088: "CNA_FC_DATA_SIZE1",
    0x1100: "CNA_DCOMP_CTRL",
    0x1104: "CNA_DCOMP_REGNUM",
    0x1110: "CNA_DCOMP_ADDR0",
    **{0x1140 + 4 * number: f"CNA_DCOMP_AMOUNT{number}" for number in range(16)},
    0x1180: "CNA_CVT_CON5",
    0x1184: "CNA_PAD_CON1",
    0x3010: "CORE_MISC_CFG",
    0x3014: "CORE_DATAOUT_SIZE_0",
    0x3018: "CORE_DATAOUT_SIZE_1",
    0x301C: "CORE_CLIP_TRUNCATE",
    0x4004: "DPU_S_POINTER",
    0x400C: "DPU_FEATURE_MODE_CFG",
    0x4010: "DPU_DATA_FORMAT",
    0x4014: "DPU_OFFSET_PEND",
    0x4020: "DPU_DST_BASE_ADDR",
    0x4024: "DPU_DST_SURF_STRIDE",
    0x4030: "DPU_DATA_CUBE_WIDTH",
    0x4034: "DPU_DATA_CUBE_HEIGHT",
    0x4038: "DPU_DATA_CUBE_NOTCH_ADDR",
    0x403C: "DPU_DATA_CUBE_CHANNEL",
    0x4040: "DPU_BS_CFG",
    0x4044: "DPU_BS_ALU_CFG",
    0x4048: "DPU_BS_MUL_CFG",
    0x404C: "DPU_BS_RELUX_CMP_VALUE",
    0x4050: "DPU_BS_OW_CFG",
    0x4054: "DPU_BS_OW_OP",
    0x4058: "DPU_WDMA_SIZE_0",
    0x405C: "DPU_WDMA_SIZE_1",
    0x4060: "DPU_BN_CFG",
    0x4064: "DPU_BN_ALU_CFG",
    0x4068: "DPU_BN_MUL_CFG",
    0x406C: "DPU_BN_RELUX_CMP_VALUE",
    0x4070: "DPU_EW_CFG",
    0x4074: "DPU_EW_CVT_OFFSET_VALUE",
    0x4078: "DPU_EW_CVT_SCALE_VALUE",
    0x407C: "DPU_EW_RELUX_CMP_VALUE",
    0x4080: "DPU_OUT_CVT_OFFSET",
    0x4084: "DPU_OUT_CVT_SCALE",
    0x4088: "DPU_OUT_CVT_SHIFT",
    **{0x4090 + 4 * number: f"DPU_EW_OP_VALUE_{number}" for number in range(8)},
    0x40C0: "DPU_SURFACE_ADD",
    0x4100: "DPU_LUT_ACCESS_CFG",
    0x4104: "DPU_LUT_ACCESS_DATA",
    0x4108: "DPU_LUT_CFG",
    0x410C: "DPU_LUT_INFO",
    0x4110: "DPU_LUT_LE_START",
    0x4114: "DPU_LUT_LE_END",
    0x4118: "DPU_LUT_LO_START",
    0x411C: "DPU_LUT_LO_END",
    0x4120: "DPU_LUT_LE_SLOPE_SCALE",
    0x4124: "DPU_LUT_LE_SLOPE_SHIFT",
    0x4128: "DPU_LUT_LO_SLOPE_SCALE",
    0x412C: "DPU_LUT_LO_SLOPE_SHIFT",
    0x5004: "RDMA_S_POINTER",
    0x500C: "RDMA_DATA_CUBE_WIDTH",
    0x5010: "RDMA_DATA_CUBE_HEIGHT",
    0x5014: "RDMA_DATA_CUBE_CHANNEL",
    0x5018: "RDMA_SRC_BASE_ADDR",
    0x501C: "RDMA_BRDMA_CFG",
    0x5020: "RDMA_BS_BASE_ADDR",
    0x5028: "RDMA_NRDMA_CFG",
    0x502C: "RDMA_BN_BASE_ADDR",
    0x5034: "RDMA_ERDMA_CFG",
    0x5038: "RDMA_EW_BASE_ADDR",
    0x5040: "RDMA_EW_SURF_STRIDE",
    0x5044: "RDMA_FEATURE_MODE_CFG",
    0x5048: "RDMA_SRC_DMA_CFG",
    0x504C: "RDMA_SURF_NOTCH",
    0x5064: "RDMA_PAD_CFG",
    0x5068: "RDMA_WEIGHT",
    0x506C: "RDMA_EW_SURF_NOTCH",
}
# Where buffers are: the kernel's choice, different in every run.
ADDRESSES = frozenset(
    {
        "PC_BASE_ADDRESS",
        "CNA_FEATURE_DATA_ADDR",
        "CNA_DCOMP_ADDR0",
        "DPU_DST_BASE_ADDR",
        "RDMA_SRC_BASE_ADDR",
        "RDMA_BS_BASE_ADDR",
        "RDMA_BN_BASE_ADDR",
        "RDMA_EW_BASE_ADDR",
    }
)
# The program controller's own words between tasks (no register of a unit).
CONTROL_TARGETS = frozenset({0x0041, 0x0081})


def name(register: int) -> str:
    return REGISTERS.get(register, f"REG_{register:04X}")


@dataclass(frozen=True)
class Buffer:
    """A buffer a task read (input, weights, biases): its size, digest, and bytes when small."""

    size: int
    digest: str
    data: bytes | None


@dataclass(frozen=True)
class Job:
    """One job as a core ran it: each register command buffer of its chain, as
    (target, register, value) entries, and the buffers each task read, by name."""

    number: int
    core: int
    tasks: tuple[tuple[tuple[int, int, int], ...], ...]
    buffers: tuple[dict[str, Buffer], ...] = ()


def read_log(path: Path) -> list[Job]:
    """The jobs of the NPU model's regcmd-log, in the order the cores ran them."""
    jobs: list[Job] = []
    number = core = -1
    tasks: list[tuple[tuple[int, int, int], ...]] = []
    buffers: list[dict[str, Buffer]] = []
    for line in path.read_text(encoding="ascii", errors="replace").splitlines():
        words = line.split()
        if words[:1] == ["job"] and len(words) == 4:
            if number >= 0:
                jobs.append(Job(number, core, tuple(tasks), tuple(buffers)))
            number, core, tasks, buffers = int(words[1]), int(words[3]), [], []
        elif words[:1] == ["task"]:
            tasks.append(tuple(_entry(int(word, 16)) for word in words[1:]))
            buffers.append({})
        elif words[:1] == ["data"] and len(words) in (4, 5) and buffers:
            data = bytes.fromhex(words[4]) if len(words) == 5 else None
            buffers[-1][words[1]] = Buffer(int(words[2]), words[3], data)
    if number >= 0:
        jobs.append(Job(number, core, tuple(tasks), tuple(buffers)))
    return jobs


def _entry(word: int) -> tuple[int, int, int]:
    return word >> 48, word & 0xFFFF, (word >> 16) & 0xFFFFFFFF


def programmed(jobs: Iterable[Job]) -> list[dict[str, int]]:
    """Each task's registers and the value each was last given, addresses left out."""
    found = []
    for job in jobs:
        for task in job.tasks:
            values: dict[str, int] = {}
            for target, register, value in task:
                if target in CONTROL_TARGETS or (target, register, value) == (0, 0, 0):
                    continue
                if name(register) not in ADDRESSES:
                    values[name(register)] = value
            found.append(values)
    return found


def read(jobs: Iterable[Job]) -> list[dict[str, Buffer]]:
    """Each task's buffers as it read them, by name."""
    return [buffers for job in jobs for buffers in job.buffers]


def listing(jobs: list[Job]) -> str:
    """A case's jobs as text, one register a line (addresses left out), then the buffers each
    task read (size, digest, bytes when small), for reading and diff."""
    lines = []
    buffers = read(jobs)
    for number, values in enumerate(programmed(jobs)):
        lines.append(f"task {number}")
        lines += [f"  {register} = 0x{value:08x}" for register, value in sorted(values.items())]
        for name, buffer in sorted((buffers[number] if number < len(buffers) else {}).items()):
            shown = f" {buffer.data.hex()}" if buffer.data is not None else ""
            lines.append(f"  buffer {name}: {buffer.size} bytes, {buffer.digest}{shown}")
    return "\n".join(lines) + "\n"


def digest(jobs: list[Job]) -> str:
    return hashlib.sha256(listing(jobs).encode()).hexdigest()[:16]


def between(jobs: list[Job], first: int, end: int) -> list[Job]:
    """The jobs numbered from ``first`` up to ``end``: a case's, by the board's counts."""
    return [job for job in jobs if first <= job.number < end]


def differences(before: list[Job], after: list[Job], limit: int = 4) -> list[dict]:
    """The registers and buffers whose values differ between two runs of the same graph,
    task by task in order: each one's tasks that differ and up to ``limit`` of its values
    (a buffer's: its digest) on each side. A different number of tasks is a difference of
    its own ("tasks")."""
    left, right = programmed(before), programmed(after)
    for task, buffers in zip(left, read(before), strict=False):
        task.update({f"{name} (buffer)": buffer.digest for name, buffer in buffers.items()})
    for task, buffers in zip(right, read(after), strict=False):
        task.update({f"{name} (buffer)": buffer.digest for name, buffer in buffers.items()})
    found: dict[str, dict] = {}
    if len(left) != len(right):
        found["tasks"] = {"register": "tasks", "tasks": 0, "values": [[len(left)], [len(right)]]}
    for a, b in zip(left, right, strict=False):
        for register in sorted(set(a) | set(b)):
            if a.get(register) == b.get(register):
                continue
            entry = found.setdefault(
                register, {"register": register, "tasks": 0, "values": [[], []]}
            )
            entry["tasks"] += 1
            for side, value in ((0, a.get(register)), (1, b.get(register))):
                shown = entry["values"][side]
                if value not in shown and len(shown) < limit:
                    shown.append(value)
    return list(found.values())
