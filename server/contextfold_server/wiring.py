"""A worker's parts and a bulk worker's, built and connected: from the configuration to their servicers.

`build` starts every dependency a worker's calls use (the database and its replicas, the model's
query lane, the sandbox, the provider channels, the caches), each closed by the exit stack it is
given, and returns the servicers over them. `build_bulk` does the same for a bulk worker (the
database, sessions at its lower priority, the model's bulk lane, the vector indexes its writes
grow, the background purge). `grpc_server` makes the gRPC server itself, with the options a mesh or
a load balancer expects.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import grpc
import psycopg

from .access.quotas import QuotaBook
from .access.sealing import Sealer, derived_key
from .api.injection import InjectionServicer
from .api.memory import MemoryServicer
from .api.paging import PageTokens
from .api.pipeline import CallPipeline
from .api.providers import ProviderServicer
from .api.requests import Capabilities
from .config import Config
from .customize.sandbox import Sandbox
from .embedding.batching import BatchingEmbedder, Lane
from .engine.memory import SearchQuery
from .engine.ranking import Ranking
from .errors import ServiceError
from .memory.expiry import purge_expired
from .memory.extractor import Extractor
from .memory.lifecycle import MemoryLifecycle
from .memory.records import UNSCOPED, ScopedIds
from .memory.remember import Rememberer
from .memory.reranker import Reranker
from .memory.search import MemorySearcher
from .memory.sentences import SentenceFiller
from .memory.statements import SEARCH_SETTINGS
from .memory.store import PostgresMemoryStore
from .observe.metrics import Metrics
from .observe.usage import UsageCounters
from .postgres.conninfo import described
from .postgres.consistency import ReadAfterTokens
from .postgres.listener import ChangeListener
from .postgres.migrations import migrate, service_secret
from .postgres.pool import Database, PoolLimits
from .postgres.priority import lower_priority_of_sessions
from .postgres.replicas import Databases
from .postgres.statistics import TableStatistics
from .postgres.vector_index import VectorIndexes
from .providers.egress import EgressPolicy
from .providers.fanout import ProviderChannels
from .providers.outcomes import ProviderOutcomes
from .providers.registry import ProviderDirectory, ProviderRepository
from .tokens import count_tokens

logger = logging.getLogger("contextfold")


@dataclass(frozen=True)
class Shared:
    """What the supervisor starts or finds once, for every worker and bulk worker."""

    # Requests' database URL, and the schema owner's (migrations, index builds, keys, secrets): the same
    # unless the operator gives a migration role of its own (`--database-migration-url`).
    database_url: str
    port: int
    # The local model's ONNX export; None with a remote embedder.
    model: Path | None
    migration_url: str = ""
    # The web console's port, held by the supervisor and shared by every worker; None when it is off.
    console_port: int | None = None
    # Where each bulk worker listens (Unix sockets in a folder of the supervisor's), which workers forward to.
    bulk_addresses: tuple[str, ...] = ()
    # Whether the database is the embedded Postgres, run by the supervisor beside the server: its sessions
    # are processes of this machine, whose CPU priority the bulk workers may lower for their own.
    embedded_database: bool = False

    @property
    def owner_url(self) -> str:
        return self.migration_url or self.database_url


@dataclass(frozen=True)
class Services:
    injection: InjectionServicer
    memory: MemoryServicer
    providers: ProviderServicer
    embedder: BatchingEmbedder
    # The primary's pool and each replica's: checked at once when the embedded database restarts.
    databases: list[Database]
    read_after: ReadAfterTokens


@dataclass(frozen=True)
class BulkServices:
    """A bulk worker's parts: the memory servicer its forwarded calls reach, over a pool and a model of its own."""

    memory: MemoryServicer
    embedder: BatchingEmbedder
    databases: list[Database]


@dataclass(frozen=True)
class _Memory:
    """What both kinds of process build alike: the database and its replicas, the model, the memory servicer."""

    database: Database
    reading: Databases
    secret: bytes
    lifecycle: MemoryLifecycle
    embedder: BatchingEmbedder
    searcher: MemorySearcher
    memory: MemoryServicer
    capabilities: Capabilities

    @property
    def databases(self) -> list[Database]:
        """The primary's pool and each replica's."""
        return [self.database, *(replica.database for replica in self.reading.replicas)]


async def _memory(
    config: Config,
    shared: Shared,
    running: contextlib.AsyncExitStack,
    metrics: Metrics,
    quotas: QuotaBook,
    usage: UsageCounters,
    lane: Lane,
    limits: PoolLimits,
    grew: Callable[[str, int, int], None] = lambda namespace, dimension, entries: None,
    prepare: Callable[[psycopg.AsyncConnection], Awaitable[None]] | None = None,
) -> _Memory:
    """Start the database (its pool's sessions made ready by `prepare`), its replicas and the model for
    `lane`, each closed by `running`, and build the memory servicer over them; `grew` is told of each
    write's growth (`VectorIndexes.grew`)."""
    embedder_loading = asyncio.create_task(open_embedder(config, shared.model, usage.count, lane))
    running.push_async_callback(_close_embedder, embedder_loading)
    # The workers say that they wait; the bulk workers wait beside them.
    await _wait_for_database(shared, config.database_wait_seconds, say=lane is Lane.QUERIES)
    database = await Database.open(
        shared.database_url, session_settings=SEARCH_SETTINGS, limits=limits, prepare=prepare
    )
    running.push_async_callback(database.close)
    metrics.watch_pool(database.stats)
    # Reads on the read replicas, if any: the primary keeps every write and whatever must see one.
    reading = await Databases.open(
        database,
        config.database_read_urls,
        SEARCH_SETTINGS,
        limits,
        max_lag=config.replica_max_lag_seconds,
        check_seconds=config.replica_check_seconds,
        observe=metrics.observe_replica,
        count_read=metrics.count_read,
    )
    running.push_async_callback(reading.close)
    if reading.replicas:
        await reading.check_replicas()
        _in_background(running, reading.watch(), "replicas")
    # One secret of the service's, shared by every replica: page and read-after tokens and provider secrets
    # are sealed with keys derived from it, and entries' etags and Remember's turns keyed.
    secret = await service_secret(shared.owner_url, "page_tokens")
    store = PostgresMemoryStore(reading, grew, etag_key=derived_key(secret, "etags"), quotas=quotas.quota)
    lifecycle = MemoryLifecycle(store)
    embedder = await embedder_loading
    metrics.watch_embedder(embedder.counts, lane.label)
    searcher = MemorySearcher(
        store,
        embedder,
        _reranker(config, running),
        Ranking(config.ranking),
        observe_rerank=lambda outcome: metrics.reranker_calls.labels(outcome).inc(),
    )
    capabilities = Capabilities(
        reranker=config.reranker_url != "",
        extractor=config.extractor_url != "",
        embedding_dimension=embedder.dimension,
    )
    memory = MemoryServicer(
        store,
        lifecycle,
        embedder,
        searcher,
        PageTokens(secret),
        Rememberer(store, lifecycle, embedder, secret, _extractor(config, running)),
        capabilities,
        ScopedIds(derived_key(secret, "scoped ids")),
    )
    return _Memory(database, reading, secret, lifecycle, embedder, searcher, memory, capabilities)


async def build(
    config: Config,
    shared: Shared,
    running: contextlib.AsyncExitStack,
    listener: ChangeListener,
    metrics: Metrics,
    own_ports: set[int],
    quotas: QuotaBook,
    usage: UsageCounters,
) -> Services:
    """Start every dependency of a worker (each closed by `running` on the way out) and build its servicers."""
    limits = PoolLimits(config.statement_timeout_seconds, config.database_connections_per_tenant)
    parts = await _memory(config, shared, running, metrics, quotas, usage, Lane.QUERIES, limits)
    providers = ProviderRepository(parts.database, Sealer(parts.secret, "provider secrets"), quotas.quota)
    # Building the policy resolves names: on a thread, as a name lookup may wait on DNS.
    policy = await asyncio.to_thread(
        EgressPolicy.from_option,
        config.provider_targets,
        own_ports,
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
    page_tokens = PageTokens(parts.secret)
    outcomes = ProviderOutcomes(shared.owner_url)
    outcomes.start()
    running.push_async_callback(outcomes.close)
    await warm_up(parts.embedder, parts.searcher, parts.database.min_size)
    return Services(
        injection=InjectionServicer(parts.searcher, directory, channels, sandbox, parts.capabilities, outcomes),
        memory=parts.memory,
        providers=ProviderServicer(providers, directory, sandbox, page_tokens, policy),
        embedder=parts.embedder,
        databases=parts.databases,
        read_after=ReadAfterTokens(parts.secret),
    )


async def build_bulk(
    config: Config,
    shared: Shared,
    running: contextlib.AsyncExitStack,
    listener: ChangeListener,
    metrics: Metrics,
    quotas: QuotaBook,
    usage: UsageCounters,
    index: int = 0,
) -> BulkServices:
    """Start every dependency of a bulk worker (each closed by `running`): its database sessions, where they
    are processes of this machine, at the bulk worker's own lower priority (`postgres/priority.py`); the
    vector indexes its writes grow, and the planner's statistics they make stale (`TableStatistics`); the purge
    of expired entries; the embedding of entries' sentences (`SentenceFiller`, the namespaces of its share: it is
    bulk worker `index` of `config.bulk_workers`)."""
    prepare = lower_priority_of_sessions(config.bulk_nice) if shared.embedded_database else None
    indexes = VectorIndexes(shared.owner_url, config.own_index_entries, prepare=prepare)
    running.push_async_callback(indexes.close)
    statistics = TableStatistics(shared.owner_url, prepare=prepare)
    running.push_async_callback(statistics.close)

    def grew(namespace: str, dimension: int, entries: int) -> None:
        indexes.grew(namespace, dimension, entries)
        statistics.wrote()

    # A tenant's bulk statements, as many at once as there are cores (`--bulk-connections-per-tenant`): more
    # only contend for them, at no gain to the tenant and at a cost to everyone's queries; the others wait
    # their turn, within the call's time, rather than being refused.
    limits = PoolLimits(
        config.statement_timeout_seconds,
        min(
            config.database_connections_per_tenant or config.bulk_connections_per_tenant,
            config.bulk_connections_per_tenant,
        ),
        turn_seconds=config.max_call_seconds,
    )
    parts = await _memory(config, shared, running, metrics, quotas, usage, Lane.BULK, limits, grew, prepare)
    await listener.start()
    running.push_async_callback(listener.close)
    await indexes.start()
    _in_background(
        running, purge_expired(parts.lifecycle, config.purge_interval_seconds, metrics.memories_purged.inc), "purge"
    )
    filler = SentenceFiller(
        parts.searcher.store,
        parts.embedder,
        (index, config.bulk_workers),
        lambda outcome, entries: metrics.sentences_settled.labels(outcome).inc(entries),
    )
    _in_background(running, filler.run(), "sentences")
    await parts.embedder.warm()
    return BulkServices(
        memory=parts.memory,
        embedder=parts.embedder,
        databases=parts.databases,
    )


# The namespace the warm-up searches act for: no key can name it (`~`), so it holds nothing.
WARM_UP_NAMESPACE = "~warm-up"


async def warm_up(embedder: BatchingEmbedder, searcher: MemorySearcher, connections: int) -> None:
    """What a fresh worker's first calls would otherwise wait on, done before it serves: the tokens'
    encoding loaded (about 150 ms), the model's first runs, and on each pooled connection the catalog
    read and the search statements planned (each ranking's, with words)."""
    started = time.perf_counter()
    await asyncio.to_thread(count_tokens, "warm up")
    await embedder.warm()
    vector = (1.0,) + (0.0,) * (embedder.dimension - 1)
    query = SearchQuery("warm up", vector, stores=(), limit=5, min_score=None, exclude_ids=frozenset())
    searches = [
        searcher.search(WARM_UP_NAMESPACE, UNSCOPED, replace(query, ranking=ranking))
        for ranking in (Ranking.SIMILARITY, Ranking.STORE_AWARE, Ranking.HYBRID)
        for _ in range(connections)
    ]
    try:
        await asyncio.gather(*searches)
    except (ServiceError, psycopg.Error) as error:
        # Warming is for speed: a worker whose warm-up failed still serves, and its first calls say why.
        logger.warning("reason=<%s> | the warm-up searches failed | serving anyway", error)
    logger.info("warmed up | seconds=<%.3f>", time.perf_counter() - started)


async def open_embedder(
    config: Config, model: Path | None, embedded: Callable[[str, str, int], None], lane: Lane
) -> BatchingEmbedder:
    """The configured embedder for `lane`, with concurrent calls batched in turns per tenant (told to
    `embedded`) and recent texts cached: the local model from its export (`model`), or, without one, the
    OpenAI-compatible endpoint."""
    if model is None:
        from .embedding.openai_compatible import OpenAICompatibleEmbedder

        remote = OpenAICompatibleEmbedder(config.openai_base_url, config.openai_model, config.openai_api_key)
        await remote.start()
        return BatchingEmbedder(remote, lane, embedded=embedded)
    from .embedding.local import LocalEmbedder

    # A query's batch on every thread, so one question embeds soonest; the bulk lane's batches on a thread
    # each, side by side: a batch of two threads waits for the one that gave its core to a query, and one
    # thread gives up only its own (measured beside a query every 50 ms: 0.81 x the rate alone, against 0.98 x).
    threads, batches_at_once = (config.embedding_threads, 1) if lane is Lane.QUERIES else (1, config.embedding_threads)
    # Loading the model takes a moment of CPU: keep it off the event loop.
    local = await asyncio.to_thread(LocalEmbedder, model, threads, batches_at_once)
    return BatchingEmbedder(local, lane, embedded=embedded)


def _reranker(config: Config, running: contextlib.AsyncExitStack) -> Reranker | None:
    if not config.reranker_url:
        return None
    reranker = Reranker(
        config.reranker_url,
        config.reranker_api,
        config.reranker_model,
        config.reranker_api_key,
        config.reranker_timeout,
    )
    running.push_async_callback(reranker.close)
    return reranker


def _extractor(config: Config, running: contextlib.AsyncExitStack) -> Extractor | None:
    if not config.extractor_url:
        return None
    extractor = Extractor(
        config.extractor_url, config.extractor_model, config.extractor_api_key, config.extractor_timeout
    )
    running.push_async_callback(extractor.close)
    return extractor


def _in_background(running: contextlib.AsyncExitStack, work: Any, name: str) -> None:
    """Run `work` (a coroutine) for as long as the worker runs; cancelled on the way out."""
    task = asyncio.create_task(work, name=name)

    async def cancel() -> None:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    running.push_async_callback(cancel)


async def _close_embedder(loading: asyncio.Task[BatchingEmbedder]) -> None:
    if not loading.done():
        loading.cancel()
    embedder = (await asyncio.gather(loading, return_exceptions=True))[0]
    if not isinstance(embedder, BaseException):
        await embedder.close()


# A database that cannot be reached is tried again after this long at first, twice as long each time
# after, up to the ceiling: a few lines a minute in the log, and a database that comes back is found
# within half a minute.
FIRST_RETRY_SECONDS = 0.5
RETRY_CEILING_SECONDS = 30.0


class StartFailed(Exception):
    """What stops a worker's start for good: said in one line, no traceback (`process.serve`)."""


async def _wait_for_database(shared: Shared, give_up_after: float = 0.0, say: bool = True) -> None:
    """Migrate the schema, waiting (NOT_SERVING) while the database cannot be reached, each try
    `FIRST_RETRY_SECONDS` and then twice as long after the last, up to `RETRY_CEILING_SECONDS`; past
    `give_up_after` seconds (0: never), `StartFailed`. With `say`, each try that failed is logged."""
    option = "--database-migration-url" if shared.migration_url else "--database-url"
    tried = "the embedded Postgres" if shared.embedded_database else f"{described(shared.owner_url)} ({option})"
    started, wait = time.monotonic(), FIRST_RETRY_SECONDS
    while True:
        try:
            await migrate(shared.owner_url, serving_url=shared.database_url)
            return
        except psycopg.OperationalError as error:
            reason = " ".join(str(error).split())
            waited = time.monotonic() - started
            if give_up_after and waited + wait > give_up_after:
                raise StartFailed(
                    f"the database at {tried} could not be reached for {waited:.0f} s (--database-wait-seconds"
                    f" {give_up_after:g}): {reason}"
                ) from None
            if say:
                logger.warning(
                    "tried=<%s> reason=<%s> | the database is not reachable | NOT_SERVING, trying again in %g s",
                    tried,
                    reason,
                    wait,
                )
            await asyncio.sleep(wait)
            wait = min(RETRY_CEILING_SECONDS, wait * 2)


def grpc_server(config: Config, pipeline: CallPipeline, port: int) -> grpc.aio.Server:
    """The gRPC server, its port added (TLS when configured), every call through `pipeline`."""
    server = grpc.aio.server(interceptors=[pipeline], options=server_options(config))
    address = f"{config.host}:{port}"
    credentials = _credentials(config)
    server.add_secure_port(address, credentials) if credentials else server.add_insecure_port(address)
    return server


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
