"""A reference for 'make bench' that moves with the machine as npuctl serve does: the seed-style
server's work (tokenize, one NPU job, normalise) on the same HTTP stack and in the same shape
as npuctl serve (aiohttp on the event loop npuctl serve would pick, keep-alive, the text
tokenized on the loop, the job handed to the one thread that owns the NPU, the vector encoded
as npuctl serve encodes it), with none of the server's own machinery (limits, queue, metrics,
connection guards). npuctl's cost per request against it is what the server adds to that
floor, which a faster or slower machine, or a busier one, changes on both sides alike. Run by
bench.serve_cost as: python -m bench.stack_server LIBRARY MODEL VOCAB (prints its port)."""

from __future__ import annotations

import asyncio
import base64
import json
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from aiohttp import web

from npuctl.platforms.zhouyi.noe.binding import NoeLibrary, Session, dequantize
from npuctl.platforms.zhouyi.pipelines.clip_tokenizer import ClipTokenizer

try:  # as npuctl serve: orjson where it is installed
    import orjson
except ImportError:  # pragma: no cover - depends on the installation
    orjson = None  # type: ignore[assignment]


def _loop_factory() -> asyncio.AbstractEventLoop:
    try:  # as npuctl serve: uvloop's loop where it is installed
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def main(library: str, model: str, vocab: str) -> None:
    tokenizer = ClipTokenizer(Path(vocab))
    with Session(NoeLibrary(library)) as npu, npu.graph(Path(model)) as graph:
        npu_thread = ThreadPoolExecutor(1)  # as the server: one thread owns the NPU

        def infer(tokens: np.ndarray) -> np.ndarray:
            with graph.job() as job:
                job.load(0, tokens)
                job.infer(10_000)
                return job.output(0)

        async def embeddings(request: web.Request) -> web.Response:
            body = json.loads(await request.read())
            tokens = tokenizer.tokenize(body["input"])
            loop = asyncio.get_running_loop()
            raw = await loop.run_in_executor(npu_thread, infer, tokens)
            vector = dequantize(raw, graph.outputs[0])
            vector = (vector / np.linalg.norm(vector)).astype("<f4")
            if body.get("encoding_format") == "base64":  # as npuctl serve answers each
                embedding: object = base64.b64encode(vector.tobytes()).decode("ascii")
            else:
                embedding = vector if orjson is not None else vector.tolist()
            document = {"data": [{"embedding": embedding}]}
            if orjson is not None:
                answer = orjson.dumps(document, option=orjson.OPT_SERIALIZE_NUMPY)
            else:
                answer = json.dumps(document).encode()
            return web.Response(body=answer, content_type="application/json")

        async def serve() -> None:
            app = web.Application()
            app.router.add_post("/v1/embeddings", embeddings)
            runner = web.AppRunner(app, access_log=None, keepalive_timeout=3600)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            server = site._server
            assert server is not None
            print(server.sockets[0].getsockname()[1], flush=True)  # type: ignore[attr-defined]
            await asyncio.Event().wait()

        with asyncio.Runner(loop_factory=_loop_factory) as runner:
            runner.run(serve())


if __name__ == "__main__":
    main(*sys.argv[1:4])
