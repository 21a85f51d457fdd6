"""The TensorFlow Lite runtime, ai-edge-litert: imported on use. Debian has no package of it,
so 'npuctl provision' installs it into RUNTIME_DIR, which is searched after the Python path
(the distribution's numpy keeps precedence)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

from npuctl.errors import ExitCode, NpuctlError

RUNTIME_DIR = "/var/lib/npuctl/python"
MISSING_FIX = (
    "sudo npuctl provision --only litert (or: pip install 'npuctl[rocket]' in npuctl's environment)"
)


def requirement() -> str:
    """The runtime's version range, as the driver's description declares it (npuctl_requires)."""
    # Here, not at the top: the child probes import this module and need neither.
    from npuctl.drivers import for_platform

    from .facts import NAME

    return next(
        needed
        for needed in for_platform(NAME).python_requires
        if needed.startswith("ai-edge-litert")
    )


class RuntimeMissing(NpuctlError):
    code = ExitCode.NPU


def load_module(runtime_dir: str = RUNTIME_DIR) -> ModuleType:
    try:
        from ai_edge_litert import interpreter
    except ImportError:
        if runtime_dir not in sys.path and Path(runtime_dir).is_dir():
            sys.path.append(runtime_dir)
            return load_module(runtime_dir)
        raise RuntimeMissing(
            f"the TensorFlow Lite runtime ai-edge-litert is not installed: {MISSING_FIX}"
        ) from None
    return interpreter


@contextmanager
def quiet_native_stderr(quiet: bool = True) -> Iterator[None]:
    """The runtime and Teflon print banners on the process's stderr (file descriptor 2).
    In npuctl's own process they are noise: the child probe that ran first has read them."""
    if not quiet:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "wb") as null:  # noqa: PTH123
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def interpreter(model: Path, delegate: Path | None, quiet: bool = True) -> Any:
    """An allocated interpreter for ``model``, through ``delegate`` when given."""
    runtime = load_module()
    with quiet_native_stderr(quiet):
        delegates = [runtime.load_delegate(str(delegate))] if delegate is not None else None
        loaded = runtime.Interpreter(model_path=str(model), experimental_delegates=delegates)
        loaded.allocate_tensors()
    return loaded


def _tensor(detail: dict) -> dict[str, object]:
    scale, zero_point = detail.get("quantization") or (0.0, 0)
    return {
        "name": str(detail.get("name", "")),
        "index": int(detail["index"]),
        "shape": [int(size) for size in detail["shape"]],
        "dtype": str(
            detail["dtype"].__name__ if hasattr(detail["dtype"], "__name__") else detail["dtype"]
        ),
        "scale": float(scale),
        "zero_point": int(zero_point),
    }


def describe(loaded: Any) -> dict[str, list[dict[str, object]]]:
    return {
        "inputs": [_tensor(d) for d in loaded.get_input_details()],
        "outputs": [_tensor(d) for d in loaded.get_output_details()],
    }
