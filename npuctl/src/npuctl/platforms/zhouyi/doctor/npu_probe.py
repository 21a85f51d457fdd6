"""The part of doctor that calls libnoe, run in a child process: a crash or a hang of the
library (or of the NPU) becomes a finding, and the context always dies with the child.

python -m npuctl.platforms.zhouyi.doctor.npu_probe library LIB
python -m npuctl.platforms.zhouyi.doctor.npu_probe model LIB NAME PATH [TIMEOUT_MS]
python -m npuctl.platforms.zhouyi.doctor.npu_probe clip-sanity LIB TEXT_MODEL VISUAL_MODEL VOCAB
Each prints one JSON object.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np


def library_facts(library: str) -> dict[str, object]:
    from npuctl.errors import NpuctlError

    from ..noe.binding import NoeLibrary, Session

    facts: dict[str, object] = {"stage": "load"}
    try:
        lib = NoeLibrary(library)
        facts["stage"] = "context"
        with Session(lib) as npu:
            facts.update({"topology": npu.topology(), "target": npu.target()})
            try:
                facts["versions"] = npu.versions()
            except NpuctlError as refused:  # a library whose commands npuctl does not know
                facts["versions"] = {"umd": lib.version, "kmd": "", "refused": str(refused)}
            facts["stage"] = "done"
    except NpuctlError as error:
        facts["error"] = str(error)
        facts["status"] = getattr(error, "status", None)
    return facts


def model_check(library: str, name: str, path: str, timeout_ms: int) -> dict[str, object]:
    from npuctl.errors import NpuctlError

    from ..noe.binding import NoeLibrary, Session

    result: dict[str, object] = {"name": name, "stage": "load"}
    try:
        with Session(NoeLibrary(library)) as npu, npu.graph(Path(path)) as graph:
            from ..runtime import Model

            model = Model(graph, Path(path), timeout_ms)
            rng = np.random.default_rng(7)
            first = [rng.integers(0, 100, i.count).astype(i.dtype) for i in graph.inputs]
            second = [rng.integers(0, 100, i.count).astype(i.dtype) for i in graph.inputs]
            timings = []
            outputs = []
            for attempt, inputs in enumerate((first, first, second), start=1):
                result["stage"] = f"inference {attempt}"
                started = time.perf_counter()
                out = model.run(inputs)
                timings.append((time.perf_counter() - started) * 1000)
                outputs.append(out.values())
            result.update(
                {
                    "stage": "done",
                    "milliseconds": [round(t, 3) for t in timings],
                    "finite": bool(all(np.isfinite(o).all() for o in outputs)),
                    "deterministic": bool(np.array_equal(outputs[0], outputs[1])),
                    "input_sensitive": bool(not np.array_equal(outputs[0], outputs[2])),
                }
            )
    except NpuctlError as error:
        result["error"] = str(error)
        result["status"] = getattr(error, "status", None)
    return result


def clip_sanity(library: str, text_model: str, visual_model: str, vocab: str) -> dict:
    """Text-image agreement on a picture drawn here: a red disc on white."""
    from PIL import Image, ImageDraw

    from npuctl.embeddings import normalise

    from ..noe.binding import NoeLibrary, Session, quantize
    from ..pipelines import clip_image
    from ..pipelines.clip_tokenizer import ClipTokenizer
    from ..runtime import Model

    picture = Image.new("RGB", (320, 320), "white")
    ImageDraw.Draw(picture).ellipse((60, 60, 260, 260), fill=(220, 20, 20))
    texts = ["a red circle", "a photo of a dog"]
    tokenizer = ClipTokenizer(Path(vocab))
    with Session(NoeLibrary(library)) as npu:
        with npu.graph(Path(visual_model)) as graph:
            info = graph.inputs[0]
            data = (
                clip_image.quantized(picture, info.scale, info.zero_point, info.dtype)
                if info.dtype.kind in "iu"
                else quantize(clip_image.preprocess(picture), info)
            )
            image = normalise(Model(graph, Path(visual_model), 10_000).run([data]).values())
        with npu.graph(Path(text_model)) as graph:
            model = Model(graph, Path(text_model), 10_000)
            vectors = [
                normalise(model.run([tokenizer.tokenize(t).astype(graph.inputs[0].dtype)]).values())
                for t in texts
            ]
    scores = [float(v @ image) for v in vectors]
    return {"texts": texts, "scores": scores, "agrees": scores[0] > scores[1]}


def main(argv: list[str]) -> int:
    command, library, *rest = argv
    if command == "library":
        answer = library_facts(library)
    elif command == "model":
        answer = model_check(library, rest[0], rest[1], int(rest[2]) if len(rest) > 2 else 10000)
    else:
        answer = clip_sanity(library, *rest)
    print(json.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
