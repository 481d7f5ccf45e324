"""The server process: configuration, start-up, serving, and a graceful stop on SIGTERM/SIGINT."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
from dataclasses import dataclass
from pathlib import Path

import grpc
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

from .api.injection import InjectionServicer
from .api.memory import MemoryServicer
from .api.providers import ProviderServicer
from .customize.sandbox import Sandbox
from .database import Database
from .embedding import Embedder
from .memory.embedded import default_data_dir, start_embedded_postgres
from .memory.schema import migrate
from .memory.search import MemorySearcher
from .memory.store import PostgresMemoryStore
from .providers.fanout import ProviderChannels
from .providers.registry import ProviderDirectory, ProviderRepository

logger = logging.getLogger("contextfold")

SERVICE_NAMES = (
    injection_pb2.DESCRIPTOR.services_by_name["InjectionService"].full_name,
    memory_pb2.DESCRIPTOR.services_by_name["MemoryService"].full_name,
    provider_pb2.DESCRIPTOR.services_by_name["ProviderService"].full_name,
)


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
    args = parser.parse_args(argv)
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
    )


async def open_embedder(config: Config) -> Embedder:
    if config.embedder == "openai":
        from .embedding.openai_compatible import OpenAICompatibleEmbedder

        remote = OpenAICompatibleEmbedder(config.openai_base_url, config.openai_model, config.openai_api_key)
        await remote.start()
        return remote
    from .embedding.local import LocalEmbedder

    # Loading the model takes seconds of CPU: keep it off the event loop.
    return await asyncio.to_thread(LocalEmbedder)


async def serve(config: Config) -> None:
    database_url = config.database_url or await asyncio.to_thread(start_embedded_postgres, config.data_dir)
    embedder_loading = asyncio.create_task(open_embedder(config))
    await migrate(database_url)
    database = await Database.open(database_url)
    store = PostgresMemoryStore(database)
    providers = ProviderRepository(database)
    channels = ProviderChannels()
    directory = ProviderDirectory(providers, database_url, on_refresh=channels.keep_only)
    await directory.start()
    sandbox = Sandbox(workers=config.sandbox_workers, time_limit=config.sandbox_time_limit)
    await sandbox.start()
    embedder = await embedder_loading
    searcher = MemorySearcher(store, embedder)

    server = grpc.aio.server()
    injection_pb2_grpc.add_InjectionServiceServicer_to_server(
        InjectionServicer(searcher, directory, channels, sandbox), server
    )
    memory_pb2_grpc.add_MemoryServiceServicer_to_server(MemoryServicer(store, embedder, searcher), server)
    provider_pb2_grpc.add_ProviderServiceServicer_to_server(ProviderServicer(providers, directory), server)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection((*SERVICE_NAMES, health.SERVICE_NAME, reflection.SERVICE_NAME), server)
    port = server.add_insecure_port(f"{config.host}:{config.port}")
    await server.start()
    for name in ("", *SERVICE_NAMES):
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    logger.info("serving on %s:%d | embedder=<%s> dimension=<%d>", config.host, port, embedder.name, embedder.dimension)

    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    await stopping.wait()

    logger.info("stopping | grace_seconds=<%s>", config.grace_seconds)
    await health_servicer.enter_graceful_shutdown()
    await server.stop(config.grace_seconds)
    await directory.close()
    await channels.close()
    await sandbox.close()
    await database.close()
    await embedder.close()
    logger.info("stopped")


def main(argv: list[str] | None = None) -> None:
    config = parse_config(argv)
    logging.basicConfig(level=config.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s")
    for noisy in ("httpx", "sentence_transformers", "pgserver", "psycopg.pool"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    asyncio.run(serve(config))


if __name__ == "__main__":
    main()
