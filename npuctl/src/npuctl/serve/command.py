"""npuctl serve: start the listeners, load and warm up the models on the NPU owner threads, plan
the memory budget, tell systemd when ready, and drain in-flight requests on SIGTERM."""

from __future__ import annotations

import asyncio
import gc
import inspect
import ipaddress
import logging
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from aiohttp import web

from ..defaults import DEFAULT_SERVE_PORT, default_serve_socket
from ..errors import ExitCode, ModelError, NpuctlError
from ..families import able, all_platforms
from ..images import map_large_allocations
from ..platform import Platform
from ..settings import Settings, pass_settings
from . import affinity, auth, families, limits, memory, systemd
from .http import HttpServer
from .metrics import Metrics
from .owner import NpuOwner
from .protocol import HttpApi, Listener, Running
from .protocol import Startup as ListenerStartup
from .protocols import HTTP, LISTENERS
from .service import PUBLIC_DEFAULT, Service

if TYPE_CHECKING:
    from ..models.manifest import FrigateFacts
    from .models import ServedModel

log = logging.getLogger("npuctl.serve")

PUBLIC_GROUPS = tuple(
    sorted({route.public for api in HTTP for route in api.routes if route.public})
)


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


def _with_limits(command: Callable[..., Any]) -> Callable[..., Any]:
    """Every limit's option (limits.py declares them once), and the options of every
    protocol that is not HTTP (each declares its own)."""
    protocols: list[HttpApi | Listener] = [*HTTP, *LISTENERS]
    options = [*limits.options(), *(option for item in protocols for option in item.options)]
    for option in reversed(options):
        command = option(command)
    return command


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
    help="TCP port (0: any free port, printed when listening).",
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
@_with_limits
@pass_settings
def serve(settings: Settings, **options: Any) -> None:
    """The inference server of the board's NPU: DeepStack's POST /v1/vision/detection and
    /v1/vision/classification, OpenAI's POST /v1/embeddings, the open inference protocol
    (KServe v2: /v2/models/NAME/infer), Immich's machine learning (POST /predict), llama.cpp's
    POST /embeddings and /props (Frigate's semantic search), /health,
    /ready, /metrics and /openapi.json. SIGTERM finishes the requests in flight; SIGHUP reads
    the API key file again."""
    logging.basicConfig(level=logging.INFO, format="npuctl serve: %(message)s", stream=sys.stderr)
    # A malformed request is answered 400 by aiohttp; it is the client's failure, not a log's.
    logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)
    try:
        wanted, opened = _names(options["model_names"]), _public(options["public"])
    except click.BadParameter as error:
        raise NpuctlError(f"{error.message}", ExitCode.USAGE) from None
    api_key_file: Path | None = options["api_key_file"]
    key = auth.load_key(api_key_file)
    platform = serving_platform(settings.platform)
    adapter = families.adapter(platform)
    serving = adapter.open_serving(settings, wanted, options["workers"])
    no_tcp, host = options["no_tcp"], options["host"]
    socket_path = (
        None if options["no_unix_socket"] else (options["unix_socket"] or default_serve_socket())
    )
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
    bounds = limits.from_options(options)
    map_large_allocations()  # freed bodies and pictures go back: the memory budget holds
    placement = affinity.pin(options["cpu"])  # before any thread starts: they inherit it
    metrics = Metrics()
    owner = NpuOwner(serving.runtimes, serving.models, bounds.queue_size, metrics)
    service = Service(
        serving,
        owner,
        metrics,
        bounds,
        options["truncate"],
        platform.name,
        key,
        opened,
        settings.manifest,
        socket_path.parent if socket_path else None,
        options,
    )
    address = None if no_tcp else (host, options["port"])

    def upload(name: str, path: Path) -> tuple[ServedModel, FrigateFacts]:
        try:
            return adapter.upload(settings, serving, name, path)
        except NotImplementedError:
            raise ModelError(f"the {platform.title} takes no uploaded model") from None

    listening = ListenerStartup(service, options, upload)
    startup = Startup(
        service, settings.max_image_pixels, address, socket_path, api_key_file, listening
    )
    with asyncio.Runner(loop_factory=_loop_factory()) as runner:
        runner.run(startup.run(placement))


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's event loop where it is installed (python3-uvloop): its transports cost a
    third of asyncio's per request; else asyncio's own."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


class Startup:
    """One run of the server: listen, load, serve until SIGTERM, drain."""

    def __init__(
        self,
        service: Service,
        max_pixels: int,
        address: tuple[str, int] | None,
        socket_path: Path | None,
        api_key_file: Path | None,
        listening: ListenerStartup,
    ) -> None:
        self.listening = listening
        self.service = service
        self.max_pixels = max_pixels
        self.address = address
        self.socket_path = socket_path
        self.api_key_file = api_key_file
        self.limit, self.limit_source = memory.memory_limit(service.limits.memory_limit)

    def _budget(self) -> memory.Budget:
        """The memory budget with what this process holds now."""
        service = self.service
        try:
            return memory.plan(
                service.limits, self.limit, self.limit_source, memory.resident(), self.max_pixels
            )
        except memory.TooLittleMemory as error:
            raise NpuctlError(str(error), ExitCode.USAGE) from None

    async def run(self, placement: str) -> None:
        loop = asyncio.get_running_loop()
        service = self.service
        service.attach(loop, self._budget())
        http = HttpServer(service, HTTP)
        runner = web.AppRunner(http.application(), **_runner_options(service.limits))
        await runner.setup()
        servers = await http.listen(runner, self.address, self.socket_path)
        where = " and ".join(_where(server, self.socket_path) for server in servers)
        others: list[Running] = []
        try:
            for listener in LISTENERS:
                if (running := await listener.start(self.listening)) is not None:
                    others.append(running)
                    log.info("%s: listening on %s", listener.name, running.where())
        except BaseException:
            await runner.cleanup()
            raise
        log.info("listening: %s (loading the models)", where)
        if service.embedder is not None:  # what Frigate's semantic search is given
            log.info(
                "llama.cpp's /embeddings: %s (Frigate's genai base_url: %s)",
                " and ".join(
                    f"{_where(server, self.socket_path)}/embeddings" for server in servers
                ),
                _where(servers[0], self.socket_path),
            )
        stop = asyncio.Event()
        for number in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(number, stop.set)
        loop.add_signal_handler(signal.SIGHUP, _reload_key, service, self.api_key_file)
        watchdog_stop = threading.Event()
        try:
            await self._load()
            systemd.start_watchdog(lambda: service.healthy()[0], watchdog_stop)
            systemd.notify("READY=1")
            log.info("ready: %s (%s)", where, placement)
            log.info("%s", _without_key(service))
            await stop.wait()
            await self._drain(servers, others)
        finally:
            watchdog_stop.set()
            for running in others:
                await running.close()
            for listening in servers:
                listening.close()
            await runner.cleanup()
            if self.socket_path is not None:
                self.socket_path.unlink(missing_ok=True)
            http.threads.shutdown(wait=False, cancel_futures=True)
        if not service.owner.stop(service.limits.deadline):
            log.warning("an NPU call has not returned: stopping without it")
        log.info("stopped")

    async def _load(self) -> None:
        """Load and warm up every model (meanwhile /health answers, /ready says loading and
        an inference waits), then plan the memory with what the warm models hold."""
        service = self.service
        owner = service.owner
        await asyncio.get_running_loop().run_in_executor(None, owner.start)
        # Everything loaded so far lives as long as the server: out of the collector's
        # sight, a full collection no longer walks it (a pause of milliseconds).
        gc.freeze()
        budget = self._budget()
        await service.warm(budget)
        log.info("%s", budget.describe())
        for name, reused in owner.reuse.reused.items():
            service.metrics.job_reuse.labels(name).set(1 if reused else 0)
            log.info(
                "%s: %s", name, "one NPU job reused" if reused else owner.reuse.why.get(name, "")
            )
        log.info(
            "models: %s",
            ", ".join(f"{name} ({model.task})" for name, model in service.serving.models.items()),
        )

    async def _drain(self, servers: list[asyncio.AbstractServer], others: list[Running]) -> None:
        service = self.service
        log.info("stopping: finishing the requests in flight")
        systemd.notify("STOPPING=1")
        service.draining.set()
        for server in servers:
            server.close()  # no new connections; open ones are answered 503 from now on
        for running in others:
            await running.close()
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, service.wait_idle, service.limits.deadline + 5)


def _runner_options(bounds: limits.Limits) -> dict[str, Any]:
    # aiohttp 3.8 cancels a handler whose client left; 3.9 and newer do when asked (the
    # client's inputs are then skipped by the NPU), and wait shutdown_timeout for handlers
    # at cleanup (the drain came first).
    newer = "handler_cancellation" in inspect.signature(web.Server.__init__).parameters
    since_3_9: dict[str, Any] = (
        {"shutdown_timeout": 1.0, "handler_cancellation": True} if newer else {}
    )
    return {
        **since_3_9,
        "access_log": None,
        # The guard cuts heads and idle connections first; aiohttp's own bounds are only a
        # backstop behind it.
        "keepalive_timeout": bounds.head_timeout * 2,
        "max_line_size": 2 * bounds.max_head,
        "max_field_size": 2 * bounds.max_head,
        "lingering_time": bounds.linger,
    }


def _without_key(service: Service) -> str:
    """What anyone who reaches the listeners may call: said at start, so an operator who
    opened Immich's routes (or forgot the key) sees it in the log."""
    if service.key is None:
        return "no API key: every route answers without one"
    opened = [route.path for api in HTTP for route in api.routes if route.public in service.public]
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


def _where(server: asyncio.AbstractServer, socket_path: Path | None) -> str:
    name = server.sockets[0].getsockname()  # type: ignore[attr-defined]
    if isinstance(name, tuple):
        host, port = name[:2]
        return f"http://{'[' + host + ']' if ':' in str(host) else host}:{port}"
    return f"unix:{socket_path}"
