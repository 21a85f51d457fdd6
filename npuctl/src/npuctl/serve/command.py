"""npuctl serve: start the listeners, load and warm up the models on the NPU owner thread, tell
systemd when ready, and drain in-flight requests on SIGTERM."""

from __future__ import annotations

import asyncio
import gc
import inspect
import ipaddress
import logging
import signal
import socket
import stat
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from aiohttp import web

from ..defaults import DEFAULT_SERVE_PORT, default_serve_socket
from ..errors import ExitCode, NpuctlError
from ..families import able, all_platforms
from ..platform import Platform
from ..settings import Settings, pass_settings
from . import affinity, auth, families, systemd
from .app import Api
from .connections import Budget, Guard, HeadLimits
from .metrics import Metrics
from .owner import NpuOwner
from .routes import PUBLIC_DEFAULT, PUBLIC_GROUPS, ROUTES
from .service import Limits, Service

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
    unknown = names - set(PUBLIC_GROUPS) - {"none"}
    if unknown:
        raise click.BadParameter(
            f"unknown {', '.join(sorted(unknown))}: choose from {', '.join(PUBLIC_GROUPS)} or none"
        )
    return names - {"none"}


@click.command()
@click.option(
    "--models",
    "model_names",
    default=None,
    metavar="NAME,...",
    help="The models to serve (npuctl models list names them, by NPU) [default: every model "
    "of the NPU that is downloaded].",
)
@click.option(
    "--workers",
    type=click.IntRange(1, 16),
    default=1,
    show_default=True,
    help="NPU owner threads, each with its own runtime; useful up to what the NPU runs at once ("
    + "; ".join(f"{p.title}: {p.serve_workers}" for p in all_platforms())
    + ").",
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
    metavar="health,immich,metrics,openapi|none",
    help="What answers without the API key (health: /health, /ready and /v2/health/*; immich: "
    "Immich's /ping, / and /predict, as its server sends no key).",
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
    help="Inputs in one embeddings request.",
)
@click.option(
    "--max-images",
    type=click.IntRange(1, 1_000),
    default=Limits.max_images,
    show_default=True,
    help="Images in one embeddings request.",
)
@click.option(
    "--max-body",
    type=click.IntRange(1024, 1 << 30),
    default=Limits.max_body,
    show_default=True,
    help="Bytes in the body of a text request (embeddings).",
)
@click.option(
    "--max-upload",
    type=click.IntRange(1024, 1 << 30),
    default=Limits.max_upload,
    show_default=True,
    help="Bytes in the body of an image or tensor request (vision, KServe v2).",
)
@click.option(
    "--max-connections",
    type=click.IntRange(1, 10_000),
    default=Limits.max_connections,
    show_default=True,
    help="TCP connections open at once (the unix socket has as many of its own); at the "
    "limit an idle or half-sent one makes room, and only when all are busy is a new one "
    "answered 503.",
)
@click.option(
    "--max-per-client",
    type=click.IntRange(1, 10_000),
    default=Limits.max_per_client,
    show_default=True,
    help="TCP connections open at once from one address.",
)
@click.option(
    "--head-timeout",
    "--read-timeout",
    "head_timeout",
    type=click.FloatRange(0.1, 3600),
    default=Limits.head_timeout,
    show_default=True,
    help="Seconds a client has to send a request's head (and to idle between requests).",
)
@click.option(
    "--body-timeout",
    type=click.FloatRange(0.1, 3600),
    default=Limits.body_timeout,
    show_default=True,
    help="Seconds a client has to send a request's body.",
)
@click.option(
    "--deadline",
    type=click.FloatRange(0.1, 3600),
    default=Limits.deadline,
    show_default=True,
    help="Seconds a request may wait for the NPU before it fails with 503 (and, once "
    "started, for the NPU's answer before it fails with 504).",
)
@click.option(
    "--decodes",
    type=click.IntRange(1, 64),
    default=Limits.decodes,
    show_default=True,
    help="Images decoded at once (each may take width x height x 3 bytes of memory).",
)
@click.option(
    "--max-detections",
    type=click.IntRange(1, 1000),
    default=Limits.max_detections,
    show_default=True,
    help="Detections in one DeepStack answer, best first (Frigate reads 20).",
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
    max_images: int,
    max_body: int,
    max_upload: int,
    max_connections: int,
    max_per_client: int,
    head_timeout: float,
    body_timeout: float,
    deadline: float,
    decodes: int,
    max_detections: int,
    truncate: bool,
    cpu: str,
    model_names: str | None,
    workers: int,
    api_key_file: Path | None,
    public: str,
) -> None:
    """The inference server of the board's NPU: DeepStack's POST /v1/vision/detection and
    /v1/vision/classification, OpenAI's POST /v1/embeddings, the open inference protocol
    (KServe v2: /v2/models/NAME/infer), Immich's machine learning (POST /predict), /health,
    /ready, /metrics and /openapi.json. SIGTERM finishes the requests in flight; SIGHUP reads
    the API key file again."""
    logging.basicConfig(level=logging.INFO, format="npuctl serve: %(message)s", stream=sys.stderr)
    # A malformed request is answered 400 by aiohttp; it is the client's failure, not a log's.
    logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)
    try:
        wanted, opened = _names(model_names), _public(public)
    except click.BadParameter as error:
        raise NpuctlError(f"{error.message}", ExitCode.USAGE) from None
    key = auth.load_key(api_key_file)
    platform = serving_platform(settings.platform)
    serving = families.adapter(platform).open_serving(settings, wanted, workers)
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
        max_body=max_body,
        max_upload=max_upload,
        max_inputs=max_inputs,
        max_images=max_images,
        max_connections=max_connections,
        max_per_client=max_per_client,
        head_timeout=head_timeout,
        body_timeout=body_timeout,
        deadline=deadline,
        max_image_pixels=settings.max_image_pixels,
        decodes=decodes,
        max_detections=max_detections,
    )
    placement = affinity.pin(cpu)  # before any thread starts: they inherit it
    metrics = Metrics()
    owner = NpuOwner(serving.runtimes, serving.models, queue_size, metrics)
    service = Service(serving, owner, metrics, limits, truncate, platform.name, key, opened)
    address = None if no_tcp else (host, port)
    with asyncio.Runner(loop_factory=_loop_factory()) as runner:
        runner.run(_run(service, address, socket_path, api_key_file, placement))


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's event loop where it is installed (python3-uvloop): its transports cost a
    third of asyncio's per request; else asyncio's own."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


async def _run(
    service: Service,
    address: tuple[str, int] | None,
    socket_path: Path | None,
    api_key_file: Path | None,
    placement: str,
) -> None:
    loop = asyncio.get_running_loop()
    limits, owner = service.limits, service.owner
    guards: dict[Any, Guard] = {}
    api = Api(service, guards)
    # aiohttp 3.8 cancels a handler whose client left; 3.9 and newer do when asked (the
    # client's inputs are then skipped by the NPU), and wait shutdown_timeout for handlers
    # at cleanup (the drain came first).
    newer = "handler_cancellation" in inspect.signature(web.Server.__init__).parameters
    since_3_9: dict[str, Any] = (
        {"shutdown_timeout": 1.0, "handler_cancellation": True} if newer else {}
    )
    runner = web.AppRunner(
        api.application(),
        **since_3_9,
        access_log=None,
        # The head watch cuts heads and idle connections first; aiohttp's own bounds are
        # only a backstop behind it.
        keepalive_timeout=limits.head_timeout * 2,
        max_line_size=2 * HeadLimits.max_head,
        max_field_size=2 * HeadLimits.max_head,
        lingering_time=HeadLimits.linger,
    )
    await runner.setup()
    head = HeadLimits(head_timeout=limits.head_timeout)
    servers = await _listen(runner, service, head, guards, address, socket_path)
    stop = asyncio.Event()
    for number in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(number, stop.set)
    loop.add_signal_handler(signal.SIGHUP, _reload_key, service, api_key_file)
    watchdog_stop = threading.Event()
    try:
        # Loads and warms up; meanwhile /health answers and /ready says loading.
        await loop.run_in_executor(None, owner.start)
        # Everything loaded so far lives as long as the server: out of the collector's
        # sight, a full collection no longer walks it (a pause of milliseconds).
        gc.freeze()
        service.loaded.set()
        for name, reused in owner.reuse.reused.items():
            service.metrics.job_reuse.labels(name).set(1 if reused else 0)
            log.info(
                "%s: %s", name, "one NPU job reused" if reused else owner.reuse.why.get(name, "")
            )
        systemd.start_watchdog(lambda: service.healthy()[0], watchdog_stop)
        systemd.notify("READY=1")
        log.info(
            "models: %s",
            ", ".join(f"{name} ({model.task})" for name, model in service.serving.models.items()),
        )
        where = " and ".join(_where(server, socket_path) for server in servers)
        log.info("ready: %s (%s)", where, placement)
        log.info("%s", _without_key(service))
        await stop.wait()
        log.info("stopping: finishing the requests in flight")
        systemd.notify("STOPPING=1")
        service.draining.set()
        for server in servers:
            server.close()  # no new connections; open ones are answered 503 from now on
        await loop.run_in_executor(None, service.wait_idle, limits.deadline + 5)
    finally:
        watchdog_stop.set()
        for listening in servers:
            listening.close()
        await runner.cleanup()
        if socket_path is not None:
            socket_path.unlink(missing_ok=True)
        api.threads.shutdown(wait=False, cancel_futures=True)
    if not owner.stop(limits.deadline):
        log.warning("an NPU call has not returned: stopping without it")
    log.info("stopped")


def _without_key(service: Service) -> str:
    """What anyone who reaches the listeners may call: said at start, so an operator who
    opened Immich's routes (or forgot the key) sees it in the log."""
    if service.key is None:
        return "no API key: every route answers without one"
    opened = [route.path for route in ROUTES if route.public in service.public]
    return "without the API key: " + (", ".join(opened) if opened else "nothing")


def _reload_key(service: Service, path: Path | None) -> None:
    """SIGHUP (systemctl reload): the key file again; a broken one keeps the old key."""
    try:
        service.key = auth.load_key(path)
    except NpuctlError as error:
        log.error("SIGHUP: kept the API key: %s", error)
        return
    state = "no key" if service.key is None else "the key"
    log.info("SIGHUP: reloaded the API key (%s from %s)", state, path or "the credentials")


def serving_platform(forced: str | None) -> Platform:
    return able(forced, lambda platform: platform.serves, "serves")


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


async def _listen(
    runner: web.AppRunner,
    service: Service,
    head: HeadLimits,
    guards: dict[Any, Guard],
    address: tuple[str, int] | None,
    socket_path: Path | None,
) -> list[asyncio.AbstractServer]:
    """The TCP listener and the unix socket, each with connections of its own."""
    loop = asyncio.get_running_loop()
    limits = service.limits

    protocols = runner.server
    if protocols is None:
        raise RuntimeError("the runner serves nothing before its setup")

    def guarded(budget: Budget) -> Callable[[], Guard]:
        return lambda: Guard(protocols(), budget, head, service.metrics, guards)

    servers: list[asyncio.AbstractServer] = []
    try:
        if address is not None:
            budget = Budget(limits.max_connections, limits.max_per_client)
            servers.append(
                await loop.create_server(
                    guarded(budget), address[0], address[1], reuse_address=True, backlog=128
                )
            )
        if socket_path is not None:
            socket_path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
            _remove_stale_socket(socket_path)
            budget = Budget(limits.max_connections, limits.max_connections)
            servers.append(await loop.create_unix_server(guarded(budget), str(socket_path)))
            # Anyone who may reach 127.0.0.1 may use the socket too; the folder decides more.
            socket_path.chmod(0o666)
    except OSError as error:
        for listening in servers:
            listening.close()
        await runner.cleanup()
        where = f"{address[0]}:{address[1]}" if address and not servers else str(socket_path)
        raise NpuctlError(
            f"cannot listen on {where}: {error.strerror or error} (stop the other server, or "
            "choose another --port / --unix-socket)",
            ExitCode.SERVICE,
        ) from None
    return servers


def _where(server: asyncio.AbstractServer, socket_path: Path | None) -> str:
    name = server.sockets[0].getsockname()  # type: ignore[attr-defined]
    if isinstance(name, tuple):
        host, port = name[:2]
        return f"http://{'[' + host + ']' if ':' in str(host) else host}:{port}"
    return f"unix:{socket_path}"


def _remove_stale_socket(path: Path) -> None:
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise OSError(f"{path} exists and is not a socket")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(str(path))
        except OSError:
            path.unlink()  # left behind by a server that is gone
            return
    raise OSError(f"another server is listening on {path}")
