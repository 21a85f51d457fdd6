"""Child-process probes of the vendor code: Mesa's Teflon delegate and the TFLite runtime can
crash or print their only explanation on stderr, so npuctl runs them here first and reads
the answer (the last line, JSON) and stderr.

python -m npuctl.platforms.rocket.probe delegate LIBRARY
    dlopen the delegate and create one, as TFLite's external-delegate loader does. Only the
    standard library is used, so any Python (even one under qemu-user) can run it.
python -m npuctl.platforms.rocket.probe golden MODEL LIBRARY [PICTURE]
    the same input (PICTURE scaled to the model's input, else a fixed pattern) through the
    delegate and through the CPU interpreter; the golden check's verdict (a classifier's
    scores, or an SSD detector's detections).
python -m npuctl.platforms.rocket.probe model MODEL [LIBRARY]
    load MODEL with ai-edge-litert (through the delegate when given), run it once on zeros
    and describe its tensors.
python -m npuctl.platforms.rocket.probe models LIBRARY|- MODEL...
    the same for each MODEL in turn, in one process (one start of the runtime for a server's
    models): one answer, every model's description in order; ok false at the first failure.
"""

from __future__ import annotations

import ctypes
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .golden import DetectionVerdict, Verdict

CREATE = "tflite_plugin_create_delegate"
DESTROY = "tflite_plugin_destroy_delegate"
TEFLON_MARK = b"Teflon"


def delegate(library: str) -> dict[str, object]:
    path = Path(library)
    try:
        with path.open("rb") as stream:
            head = stream.read(4)
            content = head + stream.read()
    except OSError as error:
        return {"ok": False, "stage": "read", "error": f"cannot read {library}: {error.strerror}"}
    if head != b"\x7fELF":
        return {"ok": False, "stage": "format", "error": f"{library} is not a shared library"}
    if TEFLON_MARK not in content:
        return {
            "ok": False,
            "stage": "format",
            "error": f"{library} is not Mesa's Teflon delegate (mesa-teflon-delegate)",
        }
    try:
        handle = ctypes.CDLL(str(path))
    except OSError as error:
        return {"ok": False, "stage": "load", "error": f"cannot load {library}: {error}"}
    try:
        create = getattr(handle, CREATE)
        destroy = getattr(handle, DESTROY)
    except AttributeError:
        return {
            "ok": False,
            "stage": "format",
            "error": f"{library} is not a TensorFlow Lite external delegate (no {CREATE})",
        }
    create.restype = ctypes.c_void_p
    create.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    destroy.argtypes = [ctypes.c_void_p]
    sys.stderr.flush()
    created = create(None, None, 0, None)
    if not created:
        return {"ok": False, "stage": "create", "error": "the delegate returned no device"}
    destroy(created)
    return {"ok": True, "stage": "create"}


def model(model_path: str, library: str | None) -> dict[str, object]:
    from .litert import describe, interpreter

    loaded = interpreter(Path(model_path), Path(library) if library else None, quiet=False)
    described = describe(loaded)
    for tensor in loaded.get_input_details():
        import numpy as np

        loaded.set_tensor(tensor["index"], np.zeros(tensor["shape"], tensor["dtype"]))
    loaded.invoke()
    return {"ok": True, **described}


def golden_input(shape: Any, dtype: Any, picture: str | None = None) -> Any:
    """The golden check's input: the same on both sides, every run; a photograph scaled to
    the input's size where one is given (what a camera sends), else a fixed pattern."""
    import numpy as np

    if picture is not None and len(shape) == 4 and shape[-1] == 3:
        from PIL import Image

        with Image.open(picture) as opened:
            scaled = opened.convert("RGB").resize((int(shape[2]), int(shape[1])))
        data = np.asarray(scaled, np.int16).reshape(shape)
    else:
        data = np.random.default_rng(20251122).integers(0, 256, shape).astype(np.int16)
    if np.dtype(dtype) == np.int8:
        data -= 128
    return data.astype(dtype)


def golden(model_path: str, library: str, picture: str | None = None) -> dict[str, object]:
    """The same input through the delegate and through the CPU: a classifier's scores element
    by element, an SSD detector's post-processed detections; the input a photograph where one
    is given."""

    from .golden import compare, compare_detections, largest_difference
    from .litert import describe, interpreter

    answers = []
    for delegate in (Path(library), None):
        loaded = interpreter(Path(model_path), delegate, quiet=False)
        (tensor,) = loaded.get_input_details()
        loaded.set_tensor(tensor["index"], golden_input(tensor["shape"], tensor["dtype"], picture))
        loaded.invoke()
        answers.append(
            [loaded.get_tensor(output["index"]).copy() for output in loaded.get_output_details()]
        )
    verdict: Verdict | DetectionVerdict
    detections = None
    if len(answers[0]) == 1:
        verdict = compare(answers[0][0].reshape(-1), answers[1][0].reshape(-1))
    else:
        from .detect import found, output_order
        from .runtime import TensorSpec

        outputs = [TensorSpec.of(output) for output in describe(loaded)["outputs"]]
        order = output_order(Path(model_path), outputs)
        sides = [found(answer, order) for answer in answers]
        verdict = compare_detections(*sides)
        detections = dict(zip(("npu", "cpu"), (_rows(side) for side in sides), strict=True))
    return {
        "ok": True,
        "passed": verdict.passed,
        "verdict": verdict.describe(),
        "additions": _additions(loaded),
        # The largest element difference over every output, for Mesa's own per-element
        # method (its tests allow TOLERANCE 6 and nothing else): a classifier's or a feature
        # map's in steps, a detector's post-processed floats in Mesa's 1/33 steps.
        "max_difference": largest_difference(*answers),
        # A detector's answers on either side, best first: [class, score, box corners].
        "detections": detections,
    }


def _rows(side: list[Any]) -> list[list[float]]:
    """A detector's post-processed answer (boxes, classes, scores, count) as rows."""
    boxes, classes, scores, _ = side[-4:]
    return [
        [int(label), round(float(score), 4), *(round(float(v), 4) for v in box)]
        for label, score, box in zip(classes, scores, boxes.reshape(-1, 4), strict=True)
    ]


def _additions(loaded: Any) -> int | None:
    """The model's ADD operations as the CPU interpreter runs it; None where the runtime
    cannot list its operations."""
    operations = getattr(loaded, "_get_ops_details", None)
    if operations is None:
        return None
    return sum(operation.get("op_name") == "ADD" for operation in operations())


def models(library: str | None, model_paths: list[str]) -> dict[str, object]:
    described = []
    for model_path in model_paths:
        answer = model(model_path, library)
        described.append({key: value for key, value in answer.items() if key != "ok"})
    return {"ok": True, "models": described}


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == "delegate":
        answer = delegate(argv[1])
    elif len(argv) >= 3 and argv[0] == "models":
        try:
            answer = models(None if argv[1] == "-" else argv[1], argv[2:])
        except Exception as error:  # which model: each one in a child of its own says
            answer = {"ok": False, "stage": "model", "error": str(error).strip()[:300]}
    elif len(argv) >= 2 and argv[0] in ("model", "golden"):
        try:
            answer = (
                model(argv[1], argv[2] if len(argv) > 2 else None)
                if argv[0] == "model"
                else golden(argv[1], argv[2], argv[3] if len(argv) > 3 else None)
            )
        except Exception as error:  # the runtime's own words are the answer
            answer = {
                "ok": False,
                "stage": "model",
                "error": (str(error).strip().splitlines() or [type(error).__name__])[0],
            }
    else:
        sys.stderr.write(__doc__ or "")
        return 2
    sys.stdout.write(json.dumps(answer) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
