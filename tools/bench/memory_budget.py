"""make bench, the memory budget of npuctl serve: the server started with the unit's memory
limit (MemoryMax=1G, as --memory-limit), then, for each format a request may send, the largest
picture its budget admits (its decode slot's bytes over what that format and mode take a
pixel, within --max-image-pixels and --max-upload), in every decode slot at once. Verdicts:
the peak resident memory (the kernel's VmHWM, reset before each format) at most 0.8 of the
limit, and the resident memory afterwards at most 1.2 times the warm server's."""

from __future__ import annotations

import http.client
import io
import math
import re
import sys
import tempfile
import threading
from pathlib import Path

import numpy as np
from PIL import Image

from bench.doubles import doubles
from bench.report import print_rows
from bench.vision_cost import form
from npuctl.serve.memory import bytes_per_pixel
from testkit.serve_process import Server, start

BENCH = "memory-budget"
LIMIT = 1 << 30  # the unit's MemoryMax=1G
MAX_PIXELS = 50_000_000  # --max-image-pixels' default
# Each format as a request may send it, in its costliest mode.
FORMATS = (("JPEG", "RGB"), ("PNG", "RGBA"), ("WEBP", "RGB"), ("BMP", "RGB"))


def status_kib(pid: int, field: str) -> int:
    found = re.search(rf"{field}:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text())
    assert found, field
    return int(found.group(1))


def reset_peak(pid: int) -> None:
    """The kernel's peak resident size (VmHWM) starts again from the current one."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")


def budget(server: Server) -> tuple[int, int, int]:
    """The decode slot's bytes, the decode slots and the upload limit the server planned."""
    slot = server.metric('npuctl_serve_memory_budget_bytes{part="decode_slot"}')
    slots = server.metric("npuctl_serve_decode_slots")
    return int(slot), int(slots), 24 * 1024 * 1024


def largest(image_format: str, mode: str, slot: int, upload: int) -> bytes:
    """The largest picture of the format and mode the slot admits, its bytes within the
    upload limit (smooth content: photographs compress; noise would only hit the limit)."""
    pixels = min(MAX_PIXELS, int(slot // bytes_per_pixel(image_format, mode)))
    if image_format == "BMP":  # uncompressed: the upload limit decides
        pixels = min(pixels, (upload - 4096) // (4 if mode == "RGBA" else 3))
    side = math.isqrt(pixels)
    ramp = np.add.outer(np.arange(side, dtype=np.uint32), np.arange(side, dtype=np.uint32))
    planes = [(ramp % 256).astype(np.uint8), (ramp // 7 % 256).astype(np.uint8)]
    channels = [planes[0], planes[1], planes[0][::-1]] + ([planes[1]] if mode == "RGBA" else [])
    picture = Image.fromarray(np.stack(channels, axis=-1), mode)
    buffer = io.BytesIO()
    options = {"quality": 80} if image_format in ("JPEG", "WEBP") else {}
    picture.save(buffer, image_format, **options)
    data = buffer.getvalue()
    assert len(data) <= upload, (image_format, len(data))
    return data


def at_once(server: Server, data: bytes, count: int) -> list[int]:
    """``count`` detection requests of the picture at once; their statuses."""
    body, headers = form(data)
    statuses: list[int] = []
    lock = threading.Lock()

    def one() -> None:
        connection = server.connection(timeout=600)
        try:
            connection.request("POST", "/v1/vision/detection", body=body, headers=headers)
            response = connection.getresponse()
            response.read()
            with lock:
                statuses.append(response.status)
        except (OSError, http.client.HTTPException):
            with lock:
                statuses.append(0)
        finally:
            connection.close()

    threads = [threading.Thread(target=one) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return statuses


def rows(server: Server) -> list[dict]:
    pid = server.process.pid
    slot, slots, upload = budget(server)
    warm = status_kib(pid, "VmRSS")
    results = []
    for image_format, mode in FORMATS:
        data = largest(image_format, mode, slot, upload)
        size = Image.open(io.BytesIO(data)).size
        reset_peak(pid)
        statuses = at_once(server, data, slots)
        peak = status_kib(pid, "VmHWM") * 1024
        name = f"{slots} x the largest {image_format} ({mode}, {size[0]}x{size[1]}) at once"
        results.append(
            {
                "name": f"memory: {name}, peak resident",
                "unit": "MiB; reference: 0.8 of the memory limit (MemoryMax=1G)",
                "ours": peak / 2**20,
                "reference": 0.8 * LIMIT / 2**20,
                "ratio": peak / (0.8 * LIMIT),
                "target": "ours/reference <= 1, every request answered 200",
                "ok": peak <= 0.8 * LIMIT and statuses == [200] * slots,
            }
        )
        print(f"{name}: {len(data) / 2**20:.1f} MiB sent, statuses {statuses}")
    after = status_kib(pid, "VmRSS")
    results.append(
        {
            "name": "memory: resident after the largest pictures",
            "unit": "MiB; reference: the warm server's resident memory",
            "ours": after / 1024,
            "reference": warm / 1024,
            "ratio": after / warm,
            "target": "ours/reference <= 1.2",
            "ok": after / warm <= 1.2,
        }
    )
    return results


def main() -> int:
    with tempfile.TemporaryDirectory() as scratch_name:
        scratch = Path(scratch_name)
        env = doubles(scratch).zhouyi
        server = start(env, "--models", "yolo", "--memory-limit", str(LIMIT))
        try:
            results = rows(server)
        finally:
            server.stop()
    return 0 if print_rows(results, BENCH) else 1


if __name__ == "__main__":
    sys.exit(main())
