"""The reference for 'make bench': an embedding server written the way the community one is —
Python's HTTP/1.0 server, a new NPU job per request, the vector as JSON floats. Run by
bench.serve_cost as: python -m bench.seed_server LIBRARY MODEL VOCAB (prints its port)."""

from __future__ import annotations

import json
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import numpy as np

from npuctl.platforms.zhouyi.noe.binding import NoeLibrary, Session, dequantize
from npuctl.platforms.zhouyi.pipelines.clip_tokenizer import ClipTokenizer


def main(library: str, model: str, vocab: str) -> None:
    tokenizer = ClipTokenizer(Path(vocab))
    with Session(NoeLibrary(library)) as npu, npu.graph(Path(model)) as graph:

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                tokens = tokenizer.tokenize(body["input"])
                with graph.job() as job:
                    job.load(0, tokens)
                    job.infer(10_000)
                    raw = job.output(0)
                vector = dequantize(raw, graph.outputs[0])
                vector = vector / np.linalg.norm(vector)
                answer = json.dumps({"data": [{"embedding": vector.tolist()}]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *_: object) -> None:
                pass

        server = HTTPServer(("127.0.0.1", 0), Handler)
        print(server.server_address[1], flush=True)
        server.serve_forever()


if __name__ == "__main__":
    main(*sys.argv[1:4])
