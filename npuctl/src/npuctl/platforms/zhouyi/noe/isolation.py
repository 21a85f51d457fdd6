"""Load a model in a child process first: libnoe segfaults on a malformed or unreadable model
file (it ignores its own parse error), and a crash must become a clear error, not kill npuctl.

Run as ``python -m npuctl.platforms.zhouyi.noe.isolation LIBRARY MODEL``: prints the
model's tensors as JSON.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from npuctl.child import run_module
from npuctl.errors import ExitCode, ModelError, NpuctlError, NpuError

_TIMEOUT_SECONDS = 120


def probe_model(library: Path, model: Path) -> dict[str, list[dict[str, object]]]:
    """The model's tensors, as the library sees them; a crash is a ModelError, a child that
    cannot be started an NpuError."""
    result = run_module(
        "npuctl.platforms.zhouyi.noe.isolation", [str(library), str(model)], _TIMEOUT_SECONDS
    )
    if not result.started:
        raise NpuError(
            f"cannot check {model} before loading it: {result.problem}; "
            "free some memory or repair the Python installation, then run it again"
        )
    if result.answer is None:
        if result.problem.startswith("crashed"):
            raise ModelError(
                f"loading {model} crashed libnoe ({result.problem[9:-1]}): the file is "
                "malformed or not a .cix model; run 'npuctl models verify' or download it again"
            )
        raise ModelError(f"checking {model} failed: {result.problem}")
    if "error" in result.answer:
        raise NpuctlError(str(result.answer["error"]), _exit_code(result.answer["code"]))
    return result.answer


def _child(library: str, model: str) -> int:
    from .binding import NoeLibrary, Session

    try:
        with Session(NoeLibrary(library)) as npu, npu.graph(Path(model)) as graph:
            print(
                json.dumps(
                    {
                        "inputs": [info.as_dict() for info in graph.inputs],
                        "outputs": [info.as_dict() for info in graph.outputs],
                    }
                )
            )
    except NpuctlError as error:
        print(json.dumps({"error": str(error), "code": int(error.code)}))
    return 0


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1], sys.argv[2]))


def _exit_code(value: object) -> ExitCode:
    """The child's exit code, as npuctl's; one it does not know is an NPU failure."""
    try:
        return ExitCode(int(str(value)))
    except ValueError:
        return ExitCode.NPU
