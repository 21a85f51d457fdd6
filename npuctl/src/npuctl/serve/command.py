"""npuctl serve: start the listeners, load and warm up the models on the NPU owner thread, tell
systemd when ready, and drain in-flight requests on SIGTERM."""

from __future__ import annotations

import gc
import ipaddress
import logging
import signal
import sys
import threading
import time
from pathlib import Path

import click

from ..cli import Settings, pass_settings
from ..defaults import DEFAULT_SERVE_PORT, default_serve_socket
from ..errors import ExitCode, NpuctlError
from ..platforms import able
from ..platforms.base import Platform
from . import affinity, auth, systemd
from .http import PUBLIC_DEFAULT, PUBLIC_PATHS, Limits, Listener, Service, TcpListener, UnixListener
from .metrics import Metrics
from .models import Serving
from .owner import NpuOwner

log = logging.getLogger("npuctl.serve")


def _names(value: str | None) -> tuple[str, ...] | None:
    if value is None:
        return None
    names = tuple(name.strip() for name in value.split(",") if name.strip())
    if not names:
        raise click.BadParameter("name at least one model (npuctl models list)")
    return names


def _public(value: str) -> frozenset[str]:
    names = frozenset(name.strip() for name in value.split(",") if name.strip())
    unknown = names - set(PUBLIC_PATHS) - {"none"}
    if unknown:
        raise click.BadParameter(
            f"unknown {', '.join(sorted(unknown))}: choose from {', '.join(PUBLIC_PATHS)} or none"
        )
    return names - {"none"}


@click.command()
@click.option(
    "--models",
    "model_names",
    default=None,
    metavar="NAME,...",
    help="The models to serve (yolo,clip on the Zhouyi; ssdlite,mobilenet,mobilenet-v2 on the "
    "RK3588) [default: every model of the NPU that is downloaded].",
)
@click.option(
    "--workers",
    type=click.IntRange(1, 16),
    default=1,
    show_default=True,
    help="NPU owner threads, each with its own runtime (RK3588: one Teflon delegate each, so "
    "jobs can reach the NPU's three cores; the Zhouyi's libnoe takes one).",
)
@click.option(
    "--api-key-file",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Require this key: 'Authorization: Bearer KEY' or DeepStack's form field api_key "
    f"[default: $CREDENTIALS_DIRECTORY/{auth.CREDENTIAL} under systemd, else no key].",
)
@click.option(
    "--public",
    default=",".join(sorted(PUBLIC_DEFAULT)),
    show_default=True,
    metavar="health,metrics,openapi|none",
    help="What answers without the API key (health: /health, /ready and /v2/health/*).",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=DEFAULT_SERVE_PORT,
    show_default=True,
    help="TCP port (0: any free port, printed when ready).",
)
@click.option("--no-tcp", is_flag=True, help="Listen on the unix socket only.")
@click.option(
    "--unix-socket",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Unix socket [default: $RUNTIME_DIRECTORY/serve.sock under systemd, else "
    "$XDG_RUNTIME_DIR/npuctl/serve.sock].",
)
@click.option("--no-unix-socket", is_flag=True, help="Listen on TCP only.")
@click.option(
    "--queue-size",
    type=click.IntRange(1, 100_000),
    default=256,
    show_default=True,
    help="Inputs that may wait for the NPU; more are answered 429 with Retry-After.",
)
@click.option(
    "--max-inputs",
    type=click.IntRange(1, 100_000),
    default=Limits.max_inputs,
    show_default=True,
    help="Inputs in one request.",
)
@click.option(
    "--max-body",
    type=click.IntRange(1024, 1 << 30),
    default=Limits.max_body,
    show_default=True,
    help="Bytes in one request body.",
)
@click.option(
    "--max-connections",
    type=click.IntRange(1, 10_000),
    default=Limits.max_connections,
    show_default=True,
    help="Connections open at once; more are answered 503.",
)
@click.option(
    "--read-timeout",
    type=click.FloatRange(0.1, 3600),
    default=Limits.read_timeout,
    show_default=True,
    help="Seconds a client has to send one request (and to idle between requests).",
)
@click.option(
    "--deadline",
    type=click.FloatRange(0.1, 3600),
    default=Limits.deadline,
    show_default=True,
    help="Seconds a request may wait for the NPU before it fails with 503.",
)
@click.option(
    "--truncate/--no-truncate",
    default=False,
    show_default=True,
    help="Cut texts over the model's context instead of answering 400 "
    '(a request\'s "truncate" overrides it).',
)
@click.option(
    "--cpu",
    default="auto",
    show_default=True,
    metavar="auto|all|N",
    help="The CPU the server's threads share (auto: the fastest this process may use); "
    "all leaves them to the scheduler. On one core a request's hand-over to the NPU thread "
    "and back costs microseconds; across cores it wakes an idle core.",
)
@pass_settings
def serve(
    settings: Settings,
    host: str,
    port: int,
    no_tcp: bool,
    unix_socket: Path | None,
    no_unix_socket: bool,
    queue_size: int,
    max_inputs: int,
    max_body: int,
    max_connections: int,
    read_timeout: float,
    deadline: float,
    truncate: bool,
    cpu: str,
    model_names: str | None,
    workers: int,
    api_key_file: Path | None,
    public: str,
) -> None:
    """The inference server of the board's NPU: DeepStack's POST /v1/vision/detection and
    /v1/vision/classification, OpenAI's POST /v1/embeddings, the open inference protocol
    (KServe v2: /v2/models/NAME/infer), /health, /ready, /metrics and /openapi.json."""
    logging.basicConfig(level=logging.INFO, format="npuctl serve: %(message)s", stream=sys.stderr)
    try:
        wanted, opened = _names(model_names), _public(public)
    except click.BadParameter as error:
        raise NpuctlError(f"{error.message}", ExitCode.USAGE) from None
    key = auth.load_key(api_key_file)
    platform = serving_platform(settings.platform)
    module, factory = platform.serving  # type: ignore[misc]
    serving: Serving = getattr(platform.module(module), factory)(settings, wanted, workers)
    socket_path = None if no_unix_socket else (unix_socket or default_serve_socket())
    if no_tcp and socket_path is None:
        raise NpuctlError(
            "--no-tcp leaves nothing to listen on: give --unix-socket PATH", ExitCode.USAGE
        )
    if key is None and not no_tcp and not _loopback(host):
        log.warning(
            "listening on %s without an API key: anyone who reaches it may use the NPU "
            "(give --api-key-file)",
            host,
        )
    limits = Limits(
        max_body, max_inputs, max_connections, read_timeout, deadline,
        max_image_pixels=settings.max_image_pixels,
    )  # fmt: skip
    placement = affinity.pin(cpu)  # before any thread starts: they inherit it
    metrics = Metrics()
    owner = NpuOwner(serving.runtimes, serving.models, queue_size, metrics)
    service = Service(serving, owner, metrics, limits, truncate, platform.name, key, opened)
    listeners = _listen(service, None if no_tcp else (host, port), socket_path)
    stop = threading.Event()
    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, lambda *_: stop.set())
    threads = [
        threading.Thread(target=listener.serve_forever, name="listener", daemon=True)
        for listener in listeners
    ]
    threading.Thread(
        target=service.reap_slow_clients, args=(stop,), name="reaper", daemon=True
    ).start()
    for thread in threads:
        thread.start()
    try:
        owner.start()  # loads and warms up; /health answers meanwhile, /ready says loading
    except BaseException:
        _close(listeners, socket_path, serving=True)
        raise
    # Everything loaded so far lives as long as the server: out of the collector's sight,
    # a full collection no longer walks it (a pause of milliseconds on a busy board).
    gc.freeze()
    service.loaded.set()
    for name, reused in owner.reuse.reused.items():
        metrics.job_reuse.labels(name).set(1 if reused else 0)
        log.info("%s: %s", name, "one NPU job reused" if reused else owner.reuse.why.get(name, ""))
    systemd.start_watchdog(lambda: _npu_answers(owner, deadline), stop)
    systemd.notify("READY=1")
    log.info(
        "models: %s", ", ".join(f"{name} ({model.task})" for name, model in serving.models.items())
    )
    log.info("ready: %s (%s)", " and ".join(_where(listener) for listener in listeners), placement)
    stop.wait()
    log.info("stopping: finishing the requests in flight")
    systemd.notify("STOPPING=1")
    service.draining.set()
    _close(listeners, socket_path, serving=True)
    service.wait_idle(deadline + 5)
    owner.stop()
    log.info("stopped")


def serving_platform(forced: str | None) -> Platform:
    return able(forced, lambda platform: platform.serving is not None, "serves")


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _listen(
    service: Service, address: tuple[str, int] | None, socket_path: Path | None
) -> list[Listener]:
    listeners: list[Listener] = []
    try:
        if address is not None:
            listeners.append(TcpListener(service, *address))
        if socket_path is not None:
            socket_path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
            listeners.append(UnixListener(service, socket_path))
    except OSError as error:
        _close(listeners, None, serving=False)
        where = f"{address[0]}:{address[1]}" if address and not listeners else str(socket_path)
        raise NpuctlError(
            f"cannot listen on {where}: {error.strerror or error} (stop the other server, or "
            "choose another --port / --unix-socket)",
            ExitCode.SERVICE,
        ) from None
    return listeners


def _close(listeners: list[Listener], socket_path: Path | None, serving: bool) -> None:
    """Stop accepting; connections already open finish their request."""
    for listener in listeners:
        if serving:
            listener.shutdown()  # type: ignore[attr-defined]
        listener.server_close()  # type: ignore[attr-defined]
    if socket_path is not None:
        socket_path.unlink(missing_ok=True)


def _where(listener: Listener) -> str:
    if isinstance(listener, TcpListener):
        host, port = listener.server_address[:2]
        return f"http://{'[' + host + ']' if ':' in str(host) else host}:{port}"
    return f"unix:{listener.server_address}"  # type: ignore[attr-defined]


def _npu_answers(owner: NpuOwner, deadline: float) -> bool:
    busy_since = owner.busy_since
    return busy_since is None or time.monotonic() - busy_since < deadline
