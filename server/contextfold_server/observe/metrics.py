"""Prometheus metrics, served on the admin port at /metrics.

Calls by method and status, call latency, Inject's time per stage (embed, search,
fold, each provider), provider outcomes, calls in flight and shed, the database
pool's use, the embedding model's calls, texts and cache hits, and how late each
worker's event loop runs.

Each worker keeps its own metrics and serves them on a port of its own on the
loopback interface; the supervisor serves the admin port, where one scrape
covers every worker (`WorkerMetrics`): samples of the same name and labels are
added up, as Prometheus' own multiprocess mode does, and the loop lag keeps a
`worker` label, since a busy loop is one worker's.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

from contextfold.v1 import injection_pb2
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from ..postgres.replicas import Replica

# From a cached embedding to a provider's full timeout.
_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

_OUTCOMES = {
    injection_pb2.SKIP_REASON_UNSPECIFIED: "injected",
    injection_pb2.SKIP_REASON_NOT_TRIGGERED: "not_triggered",
    injection_pb2.SKIP_REASON_EMPTY_TEXT: "empty",
    injection_pb2.SKIP_REASON_FAILED: "failed",
    injection_pb2.SKIP_REASON_TIMEOUT: "timeout",
    injection_pb2.SKIP_REASON_OVER_BUDGET: "over_budget",
    injection_pb2.SKIP_REASON_DISABLED: "disabled",
}


class _PoolCollector(Collector):
    def __init__(self, stats: Callable[[], dict[str, int]]) -> None:
        self._stats = stats

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "contextfold_db_pool_connections", "Database pool connections, by state", labels=["state"]
        )
        for state, value in self._stats().items():
            family.add_metric([state], value)
        yield family


_EMBEDDING_HELP = {
    "model_calls": "Calls to the embedding model (concurrent texts share one call), by lane (queries, bulk)",
    "texts": "Texts the embedding model embedded, by lane; over model calls, the mean batch",
    "padded_tokens": "Tokens of the embedding model's batches, each padded to its longest text, by lane",
    "cache_hits": "Texts answered from the cache of recent embeddings, without the model, by lane",
}


class _EmbedderCollector(Collector):
    def __init__(self, counts: Callable[[], dict[str, int]], lane: str) -> None:
        self._counts = counts
        self._lane = lane

    def collect(self) -> Iterator[CounterMetricFamily]:
        for name, value in self._counts().items():
            family = CounterMetricFamily(f"contextfold_embedding_{name}", _EMBEDDING_HELP[name], labels=["lane"])
            family.add_metric([self._lane], value)
            yield family


# Loop lag: a healthy loop is late by well under a millisecond; a quarter second is an outage.
_LAG_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class Metrics:
    def __init__(self, worker: int | str = 0, tenants: frozenset[str] = frozenset()) -> None:
        self.registry = CollectorRegistry()
        self._worker = str(worker)
        # The namespaces labelled by name in the usage metric (`*`: every one); the rest are "other".
        self._tenants = tenants
        self.loop_lag = Histogram(
            "contextfold_event_loop_lag_seconds",
            "How late each worker's event loop woke a task that asked to wake on time: every call waits that long",
            ["worker"],
            buckets=_LAG_BUCKETS,
            registry=self.registry,
        ).labels(str(worker))
        self.calls = Counter(
            "contextfold_calls", "Calls by method and status code", ["method", "code"], registry=self.registry
        )
        self.call_seconds = Histogram(
            "contextfold_call_duration_seconds", "Call latency", ["method"], buckets=_BUCKETS, registry=self.registry
        )
        self.stage_seconds = Histogram(
            "contextfold_inject_stage_duration_seconds",
            "Inject's time per stage: trigger, query, embed, search, rank, fold, total",
            ["stage"],
            buckets=_BUCKETS,
            registry=self.registry,
        )
        self.provider_seconds = Histogram(
            "contextfold_provider_duration_seconds",
            'Time waiting on each provider, by namespace and provider (both "other" for a tenant that'
            " --metrics-tenants does not name)",
            ["namespace", "provider"],
            buckets=_BUCKETS,
            registry=self.registry,
        )
        self.provider_outcomes = Counter(
            "contextfold_provider_outcomes",
            "What each provider asked contributed: injected, timeout, failed, empty, over_budget, not_triggered",
            ["namespace", "provider", "outcome"],
            registry=self.registry,
        )
        self.memories_purged = Counter(
            "contextfold_memories_purged",
            "Expired entries deleted by the background purge (they were not returned from the moment they expired)",
            registry=self.registry,
        )
        self.sentences_settled = Counter(
            "contextfold_sentences_settled",
            "Entries whose sentences the bulk workers looked at, by outcome: embedded (a row for each sentence), one"
            " (one sentence: its own vector is its sentence's), none (a vector not the server's model's)",
            ["outcome"],
            registry=self.registry,
        )
        self.reranker_calls = Counter(
            "contextfold_reranker_calls",
            "Calls to the remote reranker by outcome: ok, or timeout, unreachable, status, answer, no_text (each"
            " leaving the store-aware order)",
            ["outcome"],
            registry=self.registry,
        )
        self.in_flight = Gauge("contextfold_calls_in_flight", "Calls being served", registry=self.registry)
        # Each worker checks the replicas itself: the gauges keep the worker, as the loop lag does.
        self.replica_lag = Gauge(
            "contextfold_replica_lag_seconds",
            "How far each read replica was behind the primary at its last check (+Inf: unreachable)",
            ["replica", "worker"],
            registry=self.registry,
        )
        self.replica_usable = Gauge(
            "contextfold_replica_usable",
            "1 when the read replica answered its last check in recovery, else 0 (lag over the bound is"
            " seen in contextfold_replica_lag_seconds)",
            ["replica", "worker"],
            registry=self.registry,
        )
        self.reads = Counter(
            "contextfold_database_reads",
            "Reads by the database that answered them: primary, or a replica's name",
            ["database"],
            registry=self.registry,
        )
        self.shed = Counter(
            "contextfold_calls_shed",
            "Calls refused with RESOURCE_EXHAUSTED at a limit: the server's, or a tenant's share of it",
            ["limit"],
            registry=self.registry,
        )
        for limit in ("server", "tenant"):
            self.shed.labels(limit)
        self.full = Gauge(
            "contextfold_worker_full",
            "1 while the worker is full, refusing calls at its limit of calls in flight (health says NOT_SERVING"
            " while every worker is)",
            ["worker"],
            registry=self.registry,
        ).labels(self._worker)
        self.tenant_usage = Counter(
            "contextfold_tenant_usage",
            "What tenants did, by kind: calls:<method>, texts_embedded, tokens_injected, shed:<limit>; labelled by"
            ' namespace only for those the operator names (--metrics-tenants), the others summed as "other"',
            ["tenant", "kind"],
            registry=self.registry,
        )
        self.mesh_requests = Counter(
            "contextfold_mesh_requests",
            "Requests Envoy's external processor saw, by the API's shape and outcome: folded, or why they went on"
            " unchanged (not_a_route, bad_setting, bad_body, not_injected, refused, timeout, error)",
            ["shape", "outcome"],
            registry=self.registry,
        )
        self.idle_streams = Counter(
            "contextfold_streams_ended_idle",
            "Streams ended because they moved nothing for too long: no request came, or no answer was read",
            registry=self.registry,
        )

    def watch_pool(self, stats: Callable[[], dict[str, int]]) -> None:
        self.registry.register(_PoolCollector(stats))

    def watch_embedder(self, counts: Callable[[], dict[str, int]], lane: str) -> None:
        self.registry.register(_EmbedderCollector(counts, lane))

    def tenant(self, namespace: str) -> str:
        """A namespace as the metrics label it: by name if the operator allowed it, else "other"."""
        return namespace if "*" in self._tenants or namespace in self._tenants else "other"

    def count_usage(self, namespace: str, kind: str, amount: int) -> None:
        """A tenant's usage (observe/usage.py)."""
        self.tenant_usage.labels(self.tenant(namespace), kind).inc(amount)

    def observe_replica(self, replica: Replica) -> None:
        self.replica_lag.labels(replica.name, self._worker).set(replica.lag)
        self.replica_usable.labels(replica.name, self._worker).set(1 if replica.usable else 0)

    def count_read(self, database: str) -> None:
        self.reads.labels(database).inc()

    def observe_call(self, method: str, code: str, seconds: float) -> None:
        self.calls.labels(method, code).inc()
        self.call_seconds.labels(method).observe(seconds)

    def observe_injection(self, namespace: str, report: injection_pb2.InjectionReport) -> None:
        for stage, duration in report.stage_durations.items():
            self.stage_seconds.labels(stage).observe(duration.seconds + duration.nanos / 1e9)
        # Providers are a tenant's own: named only where the tenant is.
        tenant = self.tenant(namespace)
        for source in report.sources[1:]:  # the first is memory, whose stages are above
            provider = source.source if tenant != "other" else "other"
            outcome = "injected" if source.injected else _OUTCOMES.get(source.skip_reason, "other")
            self.provider_outcomes.labels(tenant, provider, outcome).inc()
            if source.HasField("duration"):
                seconds = source.duration.seconds + source.duration.nanos / 1e9
                self.provider_seconds.labels(tenant, provider).observe(seconds)

    def serve(self, host: str, port: int) -> int:
        """Serve /metrics on `host:port` (0 picks a port) from a thread; the port."""
        server, _ = start_http_server(port, addr=host, registry=self.registry)
        return server.server_port


class WorkerMetrics(Collector):
    """Every worker's metrics, read from their own endpoints at each scrape and added up."""

    def __init__(self, endpoints: Callable[[], Iterable[str]], timeout: float = 2.0) -> None:
        self._endpoints = endpoints
        self._timeout = timeout

    def collect(self) -> Iterator[Metric]:
        families: dict[str, Metric] = {}
        values: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]] = {}
        for endpoint in self._endpoints():
            try:
                with urllib.request.urlopen(endpoint, timeout=self._timeout) as response:
                    text = response.read().decode()
            except OSError:
                continue  # a worker starting or restarting: the next scrape has it
            for family in text_string_to_metric_families(text):
                merged = families.setdefault(family.name, Metric(family.name, family.documentation, family.type))
                samples = values.setdefault(family.name, {})
                for sample in family.samples:
                    key = (sample.name, tuple(sorted(sample.labels.items())))
                    if sample.name.endswith("_created"):
                        samples[key] = min(samples.get(key, sample.value), sample.value)
                    else:
                        samples[key] = samples.get(key, 0.0) + sample.value
        for name, merged in families.items():
            for (sample_name, labels), value in values[name].items():
                merged.add_sample(sample_name, dict(labels), value)
            yield merged
