"""The verdicts two benchmarks (DeepStack's Frigate-style clients, Frigate's zmq cameras)
reach the same way: clients one frame in flight each against one NPU, and --workers 3
against 1 on the RK3588 double."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def one_npu_rows(
    latencies: list[float],
    wall: float,
    npu: float,
    *,
    names: tuple[str, str],
    timeout: float,
    timeout_is: str,
) -> list[dict]:
    """p99 against Frigate's timeout (``timeout_is`` says which) and throughput against the
    NPU-bound limit 1 / ``npu`` (seconds), from every latency and the wall time."""
    p99_name, rate_name = names
    p99 = float(np.percentile(latencies, 99))
    rate, limit = len(latencies) / wall, 1 / npu
    return [
        {
            "name": p99_name,
            "unit": f"ms; reference: {timeout_is}",
            "ours": p99 * 1000,
            "reference": timeout * 1000,
            "ratio": p99 / timeout,
            "target": "ours/reference < 1",
            "ok": p99 < timeout,
        },
        {
            "name": rate_name,
            "unit": "frames/s; reference: the NPU-bound limit, 1 / measured NPU time",
            "ours": rate,
            "reference": limit,
            "ratio": rate / limit,
            "target": "ours/reference >= 0.95",
            "ok": rate / limit >= 0.95,
        },
    ]


def workers_row(name: str, rate_with: Callable[[int], float], rounds: int = 2) -> dict:
    """--workers 3 against --workers 1, measured in turns (``rate_with(workers)``: frames/s
    of one server so started), the median of ``rounds`` each."""
    rates: dict[int, list[float]] = {1: [], 3: []}
    for _ in range(rounds):
        for workers in (1, 3):  # in turns
            rates[workers].append(rate_with(workers))
    one, three = float(np.median(rates[1])), float(np.median(rates[3]))
    return {
        "name": name,
        "unit": "frames/s; reference: --workers 1 in the same rounds",
        "ours": three,
        "reference": one,
        "ratio": three / one,
        "target": "ours/reference >= 2.5",
        "ok": three / one >= 2.5,
    }
