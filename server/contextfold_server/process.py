"""The server process: configuration, start-up, serving, and a graceful stop on SIGTERM/SIGINT."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
from dataclasses import dataclass
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
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from .access.keys import KeyRing
from .api.injection import InjectionServicer
from .api.memory import MemoryServicer
from .api.pipeline import CallPipeline
from .api.providers import ProviderServicer
from .customize.sandbox import Sandbox
from .database import Database
from .embedding.batching import BatchingEmbedder
from .memory.embedded import default_data_dir, start_embedded_postgres
from .memory.schema import migrate
from .memory.search import MemorySearcher
from .memory.store import PostgresMemoryStore
from .observe.logs import configure_logging
from .observe.metrics import Metrics
from .observe.tracing import start_tracing, stop_tracing
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
class Config:
    host: str
    port: int
    database_url: str
    data_dir: Path
    embedder: str
    openai_base_url: str
    openai_model: str
    openai_api_key: str
    grace_seconds: float
    sandbox_workers: int
    sandbox_time_limit: float
    log_level: str
    log_format: str
    drain_seconds: float
    admin_host: str
    admin_port: int
    tls_cert_file: Path | None
    tls_key_file: Path | None
    tls_client_ca_file: Path | None
    max_in_flight: int
    max_message_bytes: int
    max_connection_age_seconds: float
    keepalive_seconds: float


def parse_config(argv: list[str] | None = None) -> Config:
    env = os.environ.get
    parser = argparse.ArgumentParser(prog="contextfold serve", description="Run the contextfold gRPC server.")
    parser.add_argument("--host", default=env("CONTEXTFOLD_HOST", "localhost"), help="address to listen on")
    parser.add_argument("--port", type=int, default=int(env("CONTEXTFOLD_PORT", "50051")), help="0 picks a free port")
    parser.add_argument(
        "--database-url",
        default=env("CONTEXTFOLD_DATABASE_URL", ""),
        help="a Postgres with pgvector; without one, an embedded Postgres is started",
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=Path(env("CONTEXTFOLD_DATA_DIR", str(default_data_dir()))),
        help="where the embedded Postgres keeps its data",
    )
    parser.add_argument("--embedder", choices=["local", "openai"], default=env("CONTEXTFOLD_EMBEDDER", "local"))
    parser.add_argument("--openai-base-url", default=env("CONTEXTFOLD_OPENAI_BASE_URL", "https://api.openai.com/v1"))
    parser.add_argument("--openai-model", default=env("CONTEXTFOLD_OPENAI_MODEL", "text-embedding-3-small"))
    parser.add_argument("--grace-seconds", type=float, default=float(env("CONTEXTFOLD_GRACE_SECONDS", "10")))
    parser.add_argument(
        "--sandbox-workers",
        type=int,
        default=int(env("CONTEXTFOLD_SANDBOX_WORKERS", "2")),
        help="processes that run callers' expressions and templates",
    )
    parser.add_argument(
        "--sandbox-time-limit-ms",
        type=int,
        default=int(env("CONTEXTFOLD_SANDBOX_TIME_LIMIT_MS", "250")),
        help="how long one expression or template may run before its worker is replaced",
    )
    parser.add_argument("--log-level", default=env("CONTEXTFOLD_LOG_LEVEL", "INFO"))
    parser.add_argument(
        "--log-format",
        choices=["json", "text"],
        default=env("CONTEXTFOLD_LOG_FORMAT", "json"),
        help="json: one object per line, one line per call",
    )
    parser.add_argument(
        "--drain-seconds",
        type=float,
        default=float(env("CONTEXTFOLD_DRAIN_SECONDS", "0")),
        help="on SIGTERM, keep serving this long with health NOT_SERVING before refusing new calls",
    )
    parser.add_argument("--admin-host", default=env("CONTEXTFOLD_ADMIN_HOST", "localhost"))
    parser.add_argument(
        "--admin-port",
        type=int,
        default=int(env("CONTEXTFOLD_ADMIN_PORT", "9464")),
        help="serves Prometheus metrics at /metrics; 0 picks a free port, -1 turns it off",
    )
    parser.add_argument("--tls-cert-file", type=Path, default=env("CONTEXTFOLD_TLS_CERT_FILE") or None)
    parser.add_argument("--tls-key-file", type=Path, default=env("CONTEXTFOLD_TLS_KEY_FILE") or None)
    parser.add_argument(
        "--tls-client-ca-file",
        type=Path,
        default=env("CONTEXTFOLD_TLS_CLIENT_CA_FILE") or None,
        help="require client certificates signed by this CA (mutual TLS)",
    )
    parser.add_argument(
        "--max-in-flight",
        type=int,
        default=int(env("CONTEXTFOLD_MAX_IN_FLIGHT", "256")),
        help="calls served at once; more are refused with RESOURCE_EXHAUSTED",
    )
    parser.add_argument(
        "--max-message-bytes",
        type=int,
        default=int(env("CONTEXTFOLD_MAX_MESSAGE_BYTES", str(4 * 1024 * 1024))),
        help="largest request accepted",
    )
    parser.add_argument(
        "--max-connection-age-seconds",
        type=float,
        default=float(env("CONTEXTFOLD_MAX_CONNECTION_AGE_SECONDS", "300")),
        help="clients reconnect after this long, so load spreads over new replicas",
    )
    parser.add_argument(
        "--keepalive-seconds",
        type=float,
        default=float(env("CONTEXTFOLD_KEEPALIVE_SECONDS", "60")),
        help="ping idle connections this often to find dead peers",
    )
    args = parser.parse_args(argv)
    if (args.tls_cert_file is None) != (args.tls_key_file is None):
        parser.error("--tls-cert-file and --tls-key-file go together")
    if args.tls_client_ca_file is not None and args.tls_cert_file is None:
        parser.error("--tls-client-ca-file needs --tls-cert-file and --tls-key-file")
    return Config(
        host=args.host,
        port=args.port,
        database_url=args.database_url,
        data_dir=args.data_dir,
        embedder=args.embedder,
        openai_base_url=args.openai_base_url,
        openai_model=args.openai_model,
        # A key on the command line would show in `ps`: it comes from the environment only.
        openai_api_key=env("CONTEXTFOLD_OPENAI_API_KEY", ""),
        grace_seconds=args.grace_seconds,
        sandbox_workers=max(1, args.sandbox_workers),
        sandbox_time_limit=max(1, args.sandbox_time_limit_ms) / 1000,
        log_level=args.log_level,
        log_format=args.log_format,
        drain_seconds=max(0.0, args.drain_seconds),
        admin_host=args.admin_host,
        admin_port=args.admin_port,
        tls_cert_file=args.tls_cert_file,
        tls_key_file=args.tls_key_file,
        tls_client_ca_file=args.tls_client_ca_file,
        max_in_flight=max(1, args.max_in_flight),
        max_message_bytes=max(1024, args.max_message_bytes),
        max_connection_age_seconds=args.max_connection_age_seconds,
        keepalive_seconds=args.keepalive_seconds,
    )


async def open_embedder(config: Config) -> BatchingEmbedder:
    """The configured embedder, with concurrent calls batched and recent texts cached."""
    if config.embedder == "openai":
        from .embedding.openai_compatible import OpenAICompatibleEmbedder

        remote = OpenAICompatibleEmbedder(config.openai_base_url, config.openai_model, config.openai_api_key)
        await remote.start()
        return BatchingEmbedder(remote)
    from .embedding.local import LocalEmbedder

    # Loading the model takes seconds of CPU: keep it off the event loop.
    return BatchingEmbedder(await asyncio.to_thread(LocalEmbedder))


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
        ("grpc.so_reuseport", 0),
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


class _Late:
    """Stands in for a servicer until its dependencies are ready (the pipeline refuses calls until then)."""

    def __init__(self, service: Any) -> None:
        self.target: Any = None
        for method in service.methods:
            setattr(self, method.name, self._forward(method.name))

    def _forward(self, name: str) -> Any:
        async def forward(request: Any, context: grpc.aio.ServicerContext) -> Any:
            return await getattr(self.target, name)(request, context)

        return forward


async def serve(config: Config) -> None:
    """Listen at once with health NOT_SERVING, start the dependencies, serve; on SIGTERM, drain and stop."""
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)

    # The embedded Postgres first: pgserver runs initdb and postgres as another user, which
    # takes a fork() that must not happen once gRPC's threads are running.
    database_url = config.database_url or await asyncio.to_thread(start_embedded_postgres, config.data_dir)
    start_tracing()
    metrics = Metrics()
    pipeline = CallPipeline(metrics, config.max_in_flight)
    server = grpc.aio.server(interceptors=[pipeline], options=server_options(config))
    late = {service.name: _Late(service) for service, _ in SERVICES}
    for service, add_to_server in SERVICES:
        add_to_server(late[service.name], server)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection((*SERVICE_NAMES, health.SERVICE_NAME, reflection.SERVICE_NAME), server)
    address = f"{config.host}:{config.port}"
    credentials = _credentials(config)
    port = server.add_secure_port(address, credentials) if credentials else server.add_insecure_port(address)

    async def report_health(status: health_pb2.HealthCheckResponse.ServingStatus.ValueType) -> None:
        for name in ("", *SERVICE_NAMES):
            await health_servicer.set(name, status)

    await report_health(health_pb2.HealthCheckResponse.NOT_SERVING)
    await server.start()
    logger.info(
        "listening on %s:%d (%s); NOT_SERVING until the database and the model are ready",
        config.host,
        port,
        "mutual TLS" if config.tls_client_ca_file else "TLS" if credentials else "plaintext",
    )
    if config.admin_port >= 0:
        admin_port = metrics.serve(config.admin_host, config.admin_port)
        logger.info("metrics on http://%s:%d/metrics", config.admin_host, admin_port)

    async with contextlib.AsyncExitStack() as running:
        starting = asyncio.create_task(_start(config, database_url, running, late, pipeline, metrics))
        stop_requested = asyncio.create_task(stopping.wait())
        await asyncio.wait({starting, stop_requested}, return_when=asyncio.FIRST_COMPLETED)
        if starting.done():
            embedder = starting.result()  # a start-up that failed raises here
            await report_health(health_pb2.HealthCheckResponse.SERVING)
            logger.info(
                "serving on %s:%d | embedder=<%s> dimension=<%d>", config.host, port, embedder.name, embedder.dimension
            )
            await stop_requested
        else:
            starting.cancel()
            await asyncio.gather(starting, return_exceptions=True)

        # Health says NOT_SERVING first, so load balancers and meshes stop sending calls;
        # calls still arrive during the drain and are served. Then new calls are refused,
        # and those in flight get the grace period to finish.
        logger.info(
            "draining | drain_seconds=<%s> grace_seconds=<%s> in_flight=<%d>",
            config.drain_seconds,
            config.grace_seconds,
            pipeline.in_flight,
        )
        await health_servicer.enter_graceful_shutdown()
        await asyncio.sleep(config.drain_seconds)
        await server.stop(config.grace_seconds)
        # The last answers are written by gRPC's own threads: let them reach the wire before exit.
        await server.wait_for_termination(timeout=1.0)
        await asyncio.sleep(0.2)
    stop_tracing()
    logger.info("stopped")


async def _wait_for_database(database_url: str) -> None:
    """Migrate the schema, waiting (NOT_SERVING) for as long as the database cannot be reached."""
    while True:
        try:
            await migrate(database_url)
            return
        except psycopg.OperationalError as error:
            logger.warning("reason=<%s> | the database is not reachable | retrying in 1 s", str(error).strip())
            await asyncio.sleep(1.0)


async def _start(
    config: Config,
    database_url: str,
    running: contextlib.AsyncExitStack,
    late: dict[str, _Late],
    pipeline: CallPipeline,
    metrics: Metrics,
) -> BatchingEmbedder:
    """Start every dependency (each closed by `running` on the way out) and put the servicers in place."""
    embedder_loading = asyncio.create_task(open_embedder(config))
    running.push_async_callback(_close_embedder, embedder_loading)
    await _wait_for_database(database_url)
    database = await Database.open(database_url)
    running.push_async_callback(database.close)
    metrics.watch_pool(database.stats)
    keys = KeyRing(database_url)
    await keys.start()
    running.push_async_callback(keys.close)
    store = PostgresMemoryStore(database)
    providers = ProviderRepository(database)
    channels = ProviderChannels()
    running.push_async_callback(channels.close)
    directory = ProviderDirectory(providers, database_url, on_refresh=channels.keep_only)
    await directory.start()
    running.push_async_callback(directory.close)
    sandbox = Sandbox(workers=config.sandbox_workers, time_limit=config.sandbox_time_limit)
    running.push_async_callback(sandbox.close)
    await sandbox.start()
    embedder = await embedder_loading
    metrics.watch_embedder(embedder.counts)
    searcher = MemorySearcher(store, embedder)
    late["InjectionService"].target = InjectionServicer(searcher, directory, channels, sandbox)
    late["MemoryService"].target = MemoryServicer(store, embedder, searcher)
    late["ProviderService"].target = ProviderServicer(providers, directory)
    pipeline.keys = keys
    return embedder


async def _close_embedder(loading: asyncio.Task[BatchingEmbedder]) -> None:
    if not loading.done():
        loading.cancel()
    embedder = (await asyncio.gather(loading, return_exceptions=True))[0]
    if not isinstance(embedder, BaseException):
        await embedder.close()


def main(argv: list[str] | None = None) -> None:
    config = parse_config(argv)
    configure_logging(config.log_level, config.log_format)
    asyncio.run(serve(config))


if __name__ == "__main__":
    main()
