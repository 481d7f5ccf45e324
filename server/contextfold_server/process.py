"""One server process (a worker): start-up, serving, and a graceful stop on SIGTERM/SIGINT.

The supervisor (`supervisor.py`) runs one per core on one port. In order: a gRPC server
listening at once with health NOT_SERVING, then the dependencies (`wiring.build`: the
database, the model, the caches, the sandbox) while callers are told to retry, then
SERVING. On SIGTERM or SIGINT: NOT_SERVING while the drain lasts, then new calls are
refused and those in flight get the grace period to finish. Each step is told to the
supervisor over `reports`, a pipe (`reports.py`), which also brings the supervisor's word
on whether every worker serves (health speaks for them all).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import shutil
import signal
import sys
import tempfile
from collections.abc import AsyncIterator, Sequence
from multiprocessing.connection import Connection
from typing import Any

import grpc
from contextfold.v1 import (
    injection_pb2,
    injection_pb2_grpc,
    memory_pb2,
    memory_pb2_grpc,
    provider_pb2,
    provider_pb2_grpc,
)
from grpc_health.v1 import health, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from .access.keys import KeyRing
from .access.quotas import QuotaBook
from .api.admission import Admission
from .api.call import CallLimits
from .api.lanes import BulkLane
from .api.pipeline import CallPipeline
from .api.readiness import Readiness
from .config import Config, default_quota
from .console.gateway import SECURITY_HEADERS, Console
from .console.http import HttpServer
from .mesh.processor import ExternalProcessor, MeshLimits
from .observe.logs import configure_logging
from .observe.loop_lag import LoopLagMonitor
from .observe.metrics import Metrics
from .observe.tracing import start_tracing, stop_tracing
from .observe.usage import UsageCounters
from .postgres.listener import ChangeListener
from .postgres.pool import Database
from .reports import (
    Admitting,
    AllServing,
    DatabaseRestarted,
    Listening,
    OwnPorts,
    Reaching,
    Reconnected,
    Serving,
    SupervisorWord,
)
from .turns import share_the_interpreter
from .wiring import Services, Shared, StartFailed, build, grpc_server

logger = logging.getLogger("contextfold")

# contextfold's services: each one's descriptor, how its servicer joins a server, and which it is.
SERVICES = (
    (injection_pb2.DESCRIPTOR.services_by_name["InjectionService"], injection_pb2_grpc, "injection"),
    (memory_pb2.DESCRIPTOR.services_by_name["MemoryService"], memory_pb2_grpc, "memory"),
    (provider_pb2.DESCRIPTOR.services_by_name["ProviderService"], provider_pb2_grpc, "providers"),
)
SERVICE_NAMES = tuple(service.full_name for service, _, _ in SERVICES)


async def serve(config: Config, shared: Shared, worker: int, reports: Connection) -> int:
    """Serve until told to stop; the worker's exit code (1: it could not start, `StartFailed`)."""
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)

    start_tracing()
    metrics = Metrics(worker, config.metrics_tenants)
    lag = LoopLagMonitor(metrics.loop_lag.observe)
    lag.start()
    listener = ChangeListener(shared.owner_url, config.cache_reload_seconds)
    # Keys are read on the owner's connection: the role that serves requests cannot read them.
    keys = KeyRing(shared.owner_url, listener, required=config.auth == "keys")
    health_servicer = health.aio.HealthServicer()
    readiness = Readiness(health_servicer, SERVICE_NAMES)
    admission = Admission(config.max_in_flight, config.max_in_flight_per_tenant)
    # Quotas are read on the owner's connection too, and kept current as keys are.
    quotas = QuotaBook(shared.owner_url, listener, default_quota(config), config.workers)
    usage = UsageCounters(shared.owner_url, observe=metrics.count_usage)
    limits = CallLimits(config.max_call_seconds, config.stream_idle_seconds)
    bulk = BulkLane(shared.bulk_addresses, config.max_message_bytes)
    pipeline = CallPipeline(metrics, admission, quotas, usage, keys, readiness, lag, limits, bulk)
    server = grpc_server(config, pipeline, shared.port)
    own = _OwnChannel(config, server) if config.ext_proc or shared.console_port is not None else None
    if config.ext_proc and own is not None:
        _mesh(config, server, own, metrics)
    pending = {name: _Pending(service) for service, _, name in SERVICES}
    for service, stubs, name in SERVICES:
        getattr(stubs, f"add_{service.name}Servicer_to_server")(pending[name], server)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection((*SERVICE_NAMES, health.SERVICE_NAME, reflection.SERVICE_NAME), server)

    await readiness.starting()
    databases: list[Database] = []
    await server.start()
    console = None
    if shared.console_port is not None and own is not None:
        console = await _console(config, shared.console_port, own, keys)
    # The worker's metrics, for the supervisor to gather: never on a public interface.
    metrics_port = metrics.serve("127.0.0.1", 0)
    # Every port the server's processes listen on, as the supervisor tells them (no provider may be one).
    own_ports = {shared.port, config.admin_port, metrics_port, *([shared.console_port] if shared.console_port else [])}
    reaching = DatabasesReached(reports, databases)
    following = hear_the_supervisor(reports, stopping, reaching, readiness, own_ports)
    reports.send(Listening(metrics_port))

    async with contextlib.AsyncExitStack() as running:
        usage.start()
        running.push_async_callback(usage.close)
        starting = asyncio.create_task(build(config, shared, running, listener, metrics, own_ports, quotas, usage))
        stop_requested = asyncio.create_task(stopping.wait())
        await asyncio.wait({starting, stop_requested}, return_when=asyncio.FIRST_COMPLETED)
        failed = starting.done() and isinstance(starting.exception(), StartFailed)
        if failed:
            logger.error("reason=<%s> | worker=<%d> | the worker cannot start | stopping", starting.exception(), worker)
        elif starting.done():
            services: Services = starting.result()  # a start-up that failed otherwise raises here
            for name, target in pending.items():
                target.target = getattr(services, name)
            pipeline.serve_with(services.read_after)
            databases.extend(services.databases)
            # What start-up built (the model, the pools, the caches, the modules) lives as long as the worker:
            # frozen out of the collector, so no collection walks it again and a pause stays short.
            gc.collect()
            gc.freeze()
            await readiness.serving()
            reports.send(Serving(services.embedder.name, services.embedder.dimension))
            telling = asyncio.create_task(_tell_admission(admission, reports, metrics, reaching))
            await stop_requested
            telling.cancel()
        else:
            starting.cancel()
            await asyncio.gather(starting, return_exceptions=True)

        if not failed:
            logger.info(
                "draining | worker=<%d> drain_seconds=<%s> grace_seconds=<%s> in_flight=<%d>",
                worker,
                config.drain_seconds,
                config.grace_seconds,
                pipeline.in_flight,
            )
            await readiness.draining()
            # The drain the operator asked for: balancers and meshes see NOT_SERVING and stop sending calls.
            await asyncio.sleep(config.drain_seconds)
        if console is not None:
            await console.close()
        await server.stop(config.grace_seconds)
        if own is not None:
            await own.close()
        await bulk.close()
        await lag.close()
        following.cancel()
    stop_tracing()
    logger.info("stopped | worker=<%d>", worker)
    return 1 if failed else 0


class _OwnChannel:
    """A socket of the worker's own on its gRPC server, and a channel to it, through which the mesh's
    processor and the console call contextfold's services as any client does (no TLS, no network: a
    folder only this process's user may enter)."""

    def __init__(self, config: Config, server: grpc.aio.Server) -> None:
        self._folder = tempfile.mkdtemp(prefix="contextfold-api-")
        address = f"unix:{self._folder}/api.sock"
        server.add_insecure_port(address)
        # As any client of the API: a request as large as the server takes, an answer as large as it gives.
        limits = [
            ("grpc.max_send_message_length", config.max_message_bytes),
            ("grpc.max_receive_message_length", 4 * config.max_message_bytes),
        ]
        self.channel = grpc.aio.insecure_channel(address, options=limits)

    async def close(self) -> None:
        await self.channel.close()
        shutil.rmtree(self._folder, ignore_errors=True)


def _mesh(config: Config, server: grpc.aio.Server, own: _OwnChannel, metrics: Metrics) -> None:
    """Envoy's external processor, served beside contextfold's services."""
    mesh = MeshLimits(config.ext_proc_timeout, config.ext_proc_max_body_bytes, config.ext_proc_outcome_header)
    processor = ExternalProcessor(lambda: own.channel, mesh, metrics.mesh_requests)
    server.add_generic_rpc_handlers((processor.handler(),))


async def _console(config: Config, port: int, own: _OwnChannel, keys: KeyRing) -> HttpServer:
    """The web console, on the port every worker shares."""
    console = Console(lambda: own.channel, keys, config.console_host)
    http = HttpServer(console.handle, SECURITY_HEADERS)
    await http.start(config.console_host, port)
    return http


class _Pending:
    """Stands in for a servicer until its dependencies are ready; the pipeline refuses calls until then."""

    def __init__(self, service: Any) -> None:
        self.target: Any = None
        for method in service.methods:
            forward = self._stream if method.server_streaming else self._forward
            setattr(self, method.name, forward(method.name))

    def _forward(self, name: str) -> Any:
        async def forward(request: Any, context: grpc.aio.ServicerContext) -> Any:
            return await getattr(self.target, name)(request, context)

        return forward

    def _stream(self, name: str) -> Any:
        async def stream(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            async for response in getattr(self.target, name)(request, context):
                yield response

        return stream


# How often a worker looks whether it admits calls and reaches a database: a worker full for less than this is
# not reported.
ADMISSION_CHECK_SECONDS = 0.5


async def _tell_admission(
    admission: Admission, reports: Connection, metrics: Metrics, reaching: DatabasesReached
) -> None:
    """Tell the supervisor whenever the worker stops admitting calls (it refused some at its limit since
    the last look, every `ADMISSION_CHECK_SECONDS`) and when it admits them again (a look finds it not
    full); and whenever no database of its own answers (the primary and every replica unreachable,
    `Database.unreachable`), and when one does again."""
    admitting = True
    while True:
        await asyncio.sleep(ADMISSION_CHECK_SECONDS)
        now = admission.admitting(admitting)
        if now != admitting:
            admitting = now
            metrics.full.set(0 if admitting else 1)
            reports.send(Admitting(admitting))
        reaching.tell()


class DatabasesReached:
    """The worker's databases (filled in once it has started), and whether one of them answers, as last told to
    the supervisor (`Reaching`, or `Reconnected` after a restart): `tell` sends a change only, whichever of
    the two looks."""

    def __init__(self, reports: Connection, databases: Sequence[Database]) -> None:
        self._reports = reports
        self._databases = databases
        self.told = True

    def now(self) -> bool:
        return any(database.unreachable is None for database in self._databases)

    def tell(self) -> None:
        now = self.now()
        if now != self.told:
            self.told = now
            self._reports.send(Reaching(now))

    async def reconnect(self) -> None:
        """After the embedded Postgres restarted: make every database's connections good (`Database.check`),
        then tell the supervisor so, with whether one answers. Health says SERVING again only once every
        worker has."""
        await asyncio.gather(*(database.check() for database in self._databases))
        self.told = self.now()
        self._reports.send(Reconnected(self.told))


def hear_the_supervisor(
    reports: Connection,
    stopping: asyncio.Event,
    reaching: DatabasesReached,
    readiness: Readiness | None = None,
    own_ports: set[int] | None = None,
) -> asyncio.Task[None]:
    """Follow the supervisor's word, in the order it comes on the pipe: whether every worker serves (told
    to `readiness`, a worker's), that the embedded database restarted (so the pools' connections, all
    lost, are replaced now rather than each failing a call first, and the supervisor told when they are:
    `reaching.reconnect`), and the ports the server listens on (kept in `own_ports`, which a worker's
    egress policy reads). Stop when the pipe closes: the supervisor is gone (killed, say), and no worker
    may outlive it."""
    loop = asyncio.get_running_loop()
    heard: asyncio.Queue[SupervisorWord | None] = asyncio.Queue()

    def read() -> None:
        try:
            heard.put_nowait(reports.recv())
        except EOFError:
            loop.remove_reader(reports.fileno())
            heard.put_nowait(None)

    async def follow() -> None:
        while (word := await heard.get()) is not None:
            if isinstance(word, AllServing) and readiness is not None:
                await readiness.all_serving(word.all_serving)
            elif isinstance(word, DatabaseRestarted):
                await reaching.reconnect()
            elif isinstance(word, OwnPorts) and own_ports is not None:
                own_ports.update(word.ports)
        logger.warning("reason=<the supervisor is gone> | stopping")
        stopping.set()

    loop.add_reader(reports.fileno(), read)
    return loop.create_task(follow())


def run_worker(config: Config, shared: Shared, worker: int, reports: Connection) -> None:
    """A worker process's entry point (the supervisor spawns it)."""
    configure_logging(config.log_level, config.log_format, worker=worker)
    share_the_interpreter()
    try:
        code = asyncio.run(serve(config, shared, worker, reports))
    finally:
        reports.close()
    sys.exit(code)
