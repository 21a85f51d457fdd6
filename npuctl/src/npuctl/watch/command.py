"""npuctl watch: every --interval seconds, measure the machine, write it as text, embed it on
the NPU, score it against the learned baseline, store it, and report anomalies."""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ..errors import ExitCode, NpuctlError
from ..params import root_option
from ..settings import Settings, pass_settings
from .detector import Detector, Verdict
from .detector import Settings as DetectorSettings
from .embedding import Embedding, LocalEmbedding, ServerEmbedding, serving
from .sensors import Sample, Sensors
from .store import Store
from .text import Renderer

if TYPE_CHECKING:  # qdrant-client is optional: imported only with --qdrant
    from .qdrant import QdrantSink

log = logging.getLogger("npuctl.watch")


def default_state_dir() -> Path:
    if state := os.environ.get("STATE_DIRECTORY"):  # systemd's StateDirectory=
        return Path(state.split(":")[0])
    system = Path("/var/lib/npuctl/watch")
    if os.access(system.parent, os.W_OK):
        return system
    return Path.home() / ".local/state/npuctl/watch"


def choose_embedding(settings: Settings, server: str | None) -> Embedding:
    if server:
        return ServerEmbedding(server)
    from ..defaults import default_serve_socket

    for candidate in (default_serve_socket(), Path("/run/npuctl/serve.sock")):
        if candidate is not None and serving(f"unix:{candidate}"):
            return ServerEmbedding(f"unix:{candidate}")
    return LocalEmbedding(settings)


@click.command()
@click.option("--interval", type=click.FloatRange(0, 86_400), default=30.0, show_default=True)
@click.option("--count", type=click.IntRange(1), default=None, help="Stop after N samples.")
@click.option(
    "--template",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="A Jinja template for the text (variables: host, cpu, ram, load, temperatures, "
    "disks, cores; filters: level, temperature_level).",
)
@click.option(
    "--server",
    default=None,
    help="Embed through npuctl serve at http://HOST:PORT or unix:PATH [default: its socket "
    "if it answers, else the NPU in this process].",
)
@click.option("--state-dir", type=click.Path(path_type=Path, file_okay=False), default=None)
@click.option(
    "--keep",
    type=click.IntRange(10),
    default=20_160,
    show_default=True,
    help="Samples kept in the local store (20,160: a week at one per 30 s).",
)
@click.option(
    "--warmup",
    type=click.IntRange(5),
    default=120,
    show_default=True,
    help="Samples that make the baseline (120: an hour at one per 30 s).",
)
@click.option(
    "--quantile",
    type=click.FloatRange(0.5, 1.0, max_open=True),
    default=0.99,
    show_default=True,
    help="Warm-up quantile of the score that sets the spike threshold.",
)
@click.option("--rebaseline", is_flag=True, help="Forget the baseline and warm up again.")
@click.option("--qdrant", default=None, help="Also write to Qdrant at URL (npuctl[qdrant]).")
@click.option("--qdrant-collection", default="npuctl-watch", show_default=True)
@click.option("--webhook", default=None, help="POST each anomaly as JSON to URL.")
@click.option("--json", "as_json", is_flag=True, help="One JSON line per sample on stdout.")
@root_option
@pass_settings
def watch(
    settings: Settings,
    interval: float,
    count: int | None,
    template: Path | None,
    server: str | None,
    state_dir: Path | None,
    keep: int,
    warmup: int,
    quantile: float,
    rebaseline: bool,
    qdrant: str | None,
    qdrant_collection: str,
    webhook: str | None,
    as_json: bool,
    root: Path,
) -> None:
    """Watch this machine: its metrics as text, embedded on the NPU, scored against a
    baseline learned in the first --warmup samples; anomalies are logged (and sent to
    --webhook). Vectors and scores are kept in a local store (and written to --qdrant)."""
    logging.basicConfig(level=logging.INFO, format="npuctl watch: %(message)s", stream=sys.stderr)
    renderer = Renderer(template, os.cpu_count() or 1)
    sensors = Sensors(root)
    renderer.render(sensors.sample())  # a template that fails, fails now
    state_dir = state_dir or default_state_dir()
    try:
        store = Store(state_dir / "watch.sqlite3", keep)
    except (OSError, Exception) as error:
        raise NpuctlError(
            f"cannot open the store in {state_dir}: {error} (choose --state-dir)", ExitCode.INPUT
        ) from None
    detector = Detector(DetectorSettings(warmup=warmup, quantile=quantile))
    if rebaseline:
        store.forget_baseline()
    elif (saved := store.load_baseline()) is not None:
        detector.restore(saved)
    embedding = choose_embedding(settings, server)
    sink = None
    if qdrant:
        from .qdrant import QdrantSink

        sink = QdrantSink(qdrant, qdrant_collection)
    stop = threading.Event()
    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, lambda *_: stop.set())
    log.info(
        "embedding with %s; store %s; %s",
        embedding.where,
        store.path,
        "baseline loaded" if not detector.warming_up else f"warming up ({warmup} samples)",
    )
    taken = 0
    try:
        while not stop.is_set():
            _one(sensors, renderer, embedding, detector, store, sink, webhook, as_json)
            taken += 1
            if count is not None and taken >= count:
                break
            stop.wait(interval)
    finally:
        embedding.close()
        if sink is not None:
            sink.close()
        store.close()


def _one(
    sensors: Sensors,
    renderer: Renderer,
    embedding: Embedding,
    detector: Detector,
    store: Store,
    sink: QdrantSink | None,
    webhook: str | None,
    as_json: bool,
) -> None:
    sample = sensors.sample()
    text = renderer.render(sample)
    try:
        vector = embedding.embed(text)
    except NpuctlError as error:
        log.warning("sample skipped: %s", error)
        return
    was_warming = detector.warming_up
    verdict = detector.observe(vector)
    if was_warming:
        store.save_baseline(detector.state())
        if not detector.warming_up:
            log.info(
                "baseline learned: spike threshold %.4f, EWMA limit %.4f",
                detector.threshold,
                detector.ewma_limit,
            )
    scored = not was_warming
    store.add(
        sample.host,
        sample.time,
        text,
        sample.as_dict(),
        vector,
        verdict.score if scored else None,
        verdict.ewma if scored else None,
        verdict.anomaly,
        verdict.reason,
    )
    if sink is not None:
        store.mark_delivered(sink.deliver(store.undelivered()))
    else:
        store.deliver_nowhere()
    record = _record(sample, text, verdict, scored)
    if as_json:
        click.echo(json.dumps(record))
    if verdict.anomaly:
        log.warning(
            "anomaly (%s): score %.4f (threshold %.4f), EWMA %.4f (limit %.4f): %s",
            verdict.reason,
            verdict.score,
            verdict.threshold,
            verdict.ewma,
            verdict.ewma_limit,
            text,
        )
        if webhook:
            _post(webhook, record)


def _record(sample: Sample, text: str, verdict: Verdict, scored: bool) -> dict[str, object]:
    return {
        "schema": "npuctl-watch/1",
        "host": sample.host,
        "time": sample.time,
        "text": text,
        "warming_up": not scored,
        "score": verdict.score if scored else None,
        "ewma": verdict.ewma if scored else None,
        "threshold": verdict.threshold if scored else None,
        "ewma_limit": verdict.ewma_limit if scored else None,
        "anomaly": verdict.anomaly,
        "reason": verdict.reason if scored else "",
        "metrics": sample.as_dict(),
    }


def _post(url: str, record: dict[str, object]) -> None:
    request = urllib.request.Request(
        url,
        data=json.dumps(record).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            response.read()
    except (urllib.error.URLError, OSError, ValueError) as error:
        log.warning("webhook %s: %s", url, error)
