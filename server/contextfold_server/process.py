"""One server process (a worker): start-up, serving, and a graceful stop on SIGTERM/SIGINT.

The supervisor (`supervisor.py`) runs one per core on one port. In order: a gRPC
server listening at once with health NOT_SERVING, then the dependencies (the
database, the model, the caches, the sandbox) while callers are told to retry,
then SERVING. On SIGTERM or SIGINT: NOT_SERVING while the drain lasts, then new
calls are refused and those in flight get the grace period to finish. Each step
is told to the supervisor over `reports`, a pipe, which also brings the supervisor's word
on whether every worker serves (health speaks for them all).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import AsyncIterator
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import grpc
import psycopg
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
from .access.sealing import Sealer
from .api.injection import InjectionServicer
from .api.memory import MemoryServicer
from .api.paging import PageTokens
from .api.pipeline import CallPipeline
from .api.providers import ProviderServicer
from .api.readiness import Readiness
from .config import Config
from .customize.sandbox import Sandbox
from .embedding.batching import BatchingEmbedder
from .engine.ranking import Ranking
from .memory.expiry import purge_expired
from .memory.extractor import Extractor
from .memory.remember import Rememberer
from .memory.reranker import Reranker
from .memory.search import MemorySearcher
from .memory.store import SEARCH_SETTINGS, PostgresMemoryStore
from .observe.logs import configure_logging
from .observe.loop_lag import LoopLagMonitor
from .observe.metrics import Metrics
from .observe.tracing import start_tracing, stop_tracing
from .postgres.listener import ChangeListener
from .postgres.migrations import migrate, service_secret
from .postgres.pool import Database
from .postgres.replicas import Databases
from .postgres.vector_index import VectorIndexes
from .providers.egress import EgressPolicy
from .providers.fanout import ProviderChannels
from .providers.registry import ProviderDirectory, ProviderRepository

logger = logging.getLogger("contextfold")

# contextfold's services: each one's descriptor, and how its servicer joins a server.
SERVICES = (
    (
        injection_pb2.DESCRIPTOR.services_by_name["InjectionService"],
        injection_pb2_grpc.add_InjectionServiceServicer_to_server,
    ),
    (memory_pb2.DESCRIPTOR.services_by_name["MemoryService"], memory_pb2_grpc.add_MemoryServiceServicer_to_server),
    (
        provider_pb2.DESCRIPTOR.services_by_name["ProviderService"],
        provider_pb2_grpc.add_ProviderServiceServicer_to_server,
    ),
)
SERVICE_NAMES = tuple(service.full_name for service, _ in SERVICES)


@dataclass(frozen=True)
class Shared:
    """What the supervisor starts or finds once, for every worker."""

    # Requests' database URL, and the schema owner's (migrations, index builds, keys, secrets): the same
    # unless the operator gives a migration role of its own (`--database-migration-url`).
    database_url: str
    port: int
    # The local model's ONNX export; None with a remote embedder.
    model: Path | None
    migration_url: str = ""

    @property
    def owner_url(self) -> str:
        return self.migration_url or self.database_url


async def serve(config: Config, shared: Shared, worker: int, reports: Connection) -> None:
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)

    start_tracing()
    metrics = Metrics(worker)
    lag = LoopLagMonitor(metrics.loop_lag.observe)
    lag.start()
    listener = ChangeListener(shared.owner_url, config.cache_reload_seconds)
    # Keys are read on the owner's connection: the role that serves requests cannot read them.
    keys = KeyRing(shared.owner_url, listener, required=config.auth == "keys")
    health_servicer = health.aio.HealthServicer()
    readiness = Readiness(health_servicer, SERVICE_NAMES)
    pipeline = CallPipeline(metrics, config.max_in_flight, keys, readiness, lag)
    server = grpc.aio.server(interceptors=[pipeline], options=server_options(config))
    pending = {service.name: _Pending(service) for service, _ in SERVICES}
    for service, add_to_server in SERVICES:
        add_to_server(pending[service.name], server)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection((*SERVICE_NAMES, health.SERVICE_NAME, reflection.SERVICE_NAME), server)
    credentials = _credentials(config)
    address = f"{config.host}:{shared.port}"
    server.add_secure_port(address, credentials) if credentials else server.add_insecure_port(address)

    await readiness.starting()
    databases: list[Database] = []
    following = _hear_the_supervisor(reports, readiness, stopping, databases)
    await server.start()
    # The worker's metrics, for the supervisor to gather: never on a public interface.
    metrics_port = metrics.serve("127.0.0.1", 0)
    reports.send(("listening", metrics_port))

    async with contextlib.AsyncExitStack() as running:
        starting = asyncio.create_task(
            _start(config, shared, running, pending, listener, metrics, databases, metrics_port)
        )
        stop_requested = asyncio.create_task(stopping.wait())
        await asyncio.wait({starting, stop_requested}, return_when=asyncio.FIRST_COMPLETED)
        if starting.done():
            embedder = starting.result()  # a start-up that failed raises here
            await readiness.serving()
            reports.send(("serving", embedder.name, embedder.dimension))
            await stop_requested
        else:
            starting.cancel()
            await asyncio.gather(starting, return_exceptions=True)

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
        await server.stop(config.grace_seconds)
        await lag.close()
        following.cancel()
    stop_tracing()
    logger.info("stopped | worker=<%d>", worker)


async def _start(
    config: Config,
    shared: Shared,
    running: contextlib.AsyncExitStack,
    pending: dict[str, _Pending],
    listener: ChangeListener,
    metrics: Metrics,
    databases: list[Database],
    metrics_port: int,
) -> BatchingEmbedder:
    """Start every dependency (each closed by `running` on the way out) and put the servicers in place."""
    embedder_loading = asyncio.create_task(open_embedder(config, shared.model))
    running.push_async_callback(_close_embedder, embedder_loading)
    await _wait_for_database(shared.owner_url, shared.database_url)
    database = await Database.open(shared.database_url, session_settings=SEARCH_SETTINGS)
    running.push_async_callback(database.close)
    databases.append(database)
    metrics.watch_pool(database.stats)
    indexes = VectorIndexes(shared.owner_url)
    running.push_async_callback(indexes.close)
    await indexes.build_missing()
    # Reads on the read replicas, if any: the primary keeps every write and whatever must see one.
    reading = await Databases.open(
        database,
        config.database_read_urls,
        SEARCH_SETTINGS,
        max_lag=config.replica_max_lag_seconds,
        check_seconds=config.replica_check_seconds,
        observe=metrics.observe_replica,
        count_read=metrics.count_read,
    )
    running.push_async_callback(reading.close)
    databases.extend(replica.database for replica in reading.replicas)
    if reading.replicas:
        await reading.check_replicas()
        watching = asyncio.create_task(reading.watch())
        running.callback(watching.cancel)
    store = PostgresMemoryStore(reading, indexes.request)
    # One secret of the service's, shared by every replica: page tokens and provider secrets are sealed with
    # keys derived from it.
    secret = await service_secret(shared.owner_url, "page_tokens")
    providers = ProviderRepository(database, Sealer(secret, "provider secrets"))
    # Building the policy resolves names: on a thread, as a name lookup may wait on DNS.
    policy = await asyncio.to_thread(
        EgressPolicy.from_option,
        config.provider_targets,
        (shared.port, config.admin_port, metrics_port),
        {shared.database_url, shared.owner_url, *config.database_read_urls},
    )
    channels = ProviderChannels(policy)
    running.push_async_callback(channels.close)
    directory = ProviderDirectory(providers, listener, on_refresh=channels.keep_only)
    await listener.start()
    running.push_async_callback(listener.close)
    sandbox = Sandbox(workers=config.sandbox_workers, time_limit=config.sandbox_time_limit)
    running.push_async_callback(sandbox.close)
    await sandbox.start()
    embedder = await embedder_loading
    metrics.watch_embedder(embedder.counts)
    reranker = (
        Reranker(
            config.reranker_url,
            config.reranker_api,
            config.reranker_model,
            config.reranker_api_key,
            config.reranker_timeout,
        )
        if config.reranker_url
        else None
    )
    if reranker is not None:
        running.push_async_callback(reranker.close)
    searcher = MemorySearcher(
        store,
        embedder,
        reranker,
        Ranking(config.ranking),
        observe_rerank=lambda outcome: metrics.reranker_calls.labels(outcome).inc(),
    )
    extractor = (
        Extractor(config.extractor_url, config.extractor_model, config.extractor_api_key, config.extractor_timeout)
        if config.extractor_url
        else None
    )
    if extractor is not None:
        running.push_async_callback(extractor.close)
    purging = asyncio.create_task(
        purge_expired(store, config.purge_interval_seconds, metrics.memories_purged.inc), name="purge"
    )
    running.push_async_callback(_cancel, purging)
    page_tokens = PageTokens(secret)
    pending["InjectionService"].target = InjectionServicer(searcher, directory, channels, sandbox)
    pending["MemoryService"].target = MemoryServicer(
        store, embedder, searcher, page_tokens, Rememberer(store, embedder, extractor)
    )
    pending["ProviderService"].target = ProviderServicer(providers, directory, sandbox, page_tokens, policy)
    return embedder


async def open_embedder(config: Config, model: Path | None) -> BatchingEmbedder:
    """The configured embedder, with concurrent calls batched and recent texts cached: the local model
    from its export (`model`), or, without one, the OpenAI-compatible endpoint."""
    if model is None:
        from .embedding.openai_compatible import OpenAICompatibleEmbedder

        remote = OpenAICompatibleEmbedder(config.openai_base_url, config.openai_model, config.openai_api_key)
        await remote.start()
        return BatchingEmbedder(remote)
    from .embedding.local import LocalEmbedder

    # Loading the model takes a moment of CPU: keep it off the event loop.
    return BatchingEmbedder(await asyncio.to_thread(LocalEmbedder, model, config.embedding_threads))


async def _cancel(task: asyncio.Task[None]) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def _close_embedder(loading: asyncio.Task[BatchingEmbedder]) -> None:
    if not loading.done():
        loading.cancel()
    embedder = (await asyncio.gather(loading, return_exceptions=True))[0]
    if not isinstance(embedder, BaseException):
        await embedder.close()


async def _wait_for_database(owner_url: str, database_url: str) -> None:
    """Migrate the schema, waiting (NOT_SERVING) for as long as the database cannot be reached."""
    while True:
        try:
            await migrate(owner_url, serving_url=database_url)
            return
        except psycopg.OperationalError as error:
            logger.warning("reason=<%s> | the database is not reachable | retrying in 1 s", str(error).strip())
            await asyncio.sleep(1.0)


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


def server_options(config: Config) -> list[tuple[str, Any]]:
    """Message limits, keepalive and connection age, suited to a mesh or a load balancer."""
    return [
        ("grpc.max_receive_message_length", config.max_message_bytes),
        ("grpc.max_send_message_length", 4 * config.max_message_bytes),
        ("grpc.keepalive_time_ms", int(config.keepalive_seconds * 1000)),
        ("grpc.keepalive_timeout_ms", 20_000),
        ("grpc.keepalive_permit_without_calls", 1),
        # Clients (and sidecars) may ping every 10 s; faster is answered with GOAWAY.
        ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
        ("grpc.http2.max_pings_without_data", 0),
        ("grpc.max_connection_age_ms", int(config.max_connection_age_seconds * 1000)),
        ("grpc.max_connection_age_grace_ms", int(config.grace_seconds * 1000)),
        # Every worker listens on the same port; the kernel spreads connections over them.
        ("grpc.so_reuseport", 1),
    ]


def _credentials(config: Config) -> grpc.ServerCredentials | None:
    if config.tls_cert_file is None or config.tls_key_file is None:
        return None
    client_ca = config.tls_client_ca_file.read_bytes() if config.tls_client_ca_file else None
    return grpc.ssl_server_credentials(
        [(config.tls_key_file.read_bytes(), config.tls_cert_file.read_bytes())],
        root_certificates=client_ca,
        require_client_auth=client_ca is not None,
    )


def _hear_the_supervisor(
    reports: Connection, readiness: Readiness, stopping: asyncio.Event, databases: list[Database]
) -> asyncio.Task[None]:
    """Follow the supervisor's word, in the order it comes on the pipe: whether every worker serves,
    and that the embedded database restarted (so the pool's connections, all lost, are replaced now
    rather than each failing a call first). Stop when the pipe closes: the supervisor is gone
    (killed, say), and a worker must not outlive it."""
    loop = asyncio.get_running_loop()
    heard: asyncio.Queue[tuple[Any, ...] | None] = asyncio.Queue()

    def read() -> None:
        try:
            heard.put_nowait(reports.recv())
        except EOFError:
            loop.remove_reader(reports.fileno())
            heard.put_nowait(None)

    async def follow() -> None:
        while (message := await heard.get()) is not None:
            if message[0] == "all_serving":
                await readiness.all_serving(message[1])
            elif message[0] == "database_restarted":
                await asyncio.gather(*(database.check() for database in databases))
        logger.warning("reason=<the supervisor is gone> | stopping")
        stopping.set()

    loop.add_reader(reports.fileno(), read)
    return loop.create_task(follow())


def run_worker(config: Config, shared: Shared, worker: int, reports: Connection) -> None:
    """A worker process's entry point (the supervisor spawns it)."""
    configure_logging(config.log_level, config.log_format, worker=worker)
    try:
        asyncio.run(serve(config, shared, worker, reports))
    finally:
        reports.close()
