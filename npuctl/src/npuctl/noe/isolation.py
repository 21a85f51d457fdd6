"""Load a model in a child process first: libnoe segfaults on a malformed or unreadable model
file (it ignores its own parse error), and a crash must become a clear error, not kill npuctl.

Run as ``python -m npuctl.noe.isolation LIBRARY MODEL``: prints the model's tensors as JSON.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

from ..errors import ModelError, NpuctlError

_TIMEOUT_SECONDS = 120


def probe_model(library: Path, model: Path) -> dict[str, list[dict[str, object]]]:
    """The model's tensors, as the library sees them; a crash is a ModelError."""
    try:
        result = subprocess.run(
            [sys.executable, "-m", "npuctl.noe.isolation", str(library), str(model)],
            capture_output=True,
            text=True,
            timeout=_TIMEOUT_SECONDS,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise ModelError(f"loading {model} did not finish in {_TIMEOUT_SECONDS} s") from None
    if result.returncode < 0:
        name = signal.Signals(-result.returncode).name
        raise ModelError(
            f"loading {model} crashed libnoe ({name}): the file is malformed or "
            "not a .cix model; run 'npuctl models verify' or download it again"
        )
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise ModelError(f"checking {model} failed: {result.stderr.strip()[-200:]}")
    answer = json.loads(lines[-1])
    if "error" in answer:
        raise NpuctlError(answer["error"], answer["code"])
    return answer


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
