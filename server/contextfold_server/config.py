"""The server's configuration: command-line options, each with an environment variable of its own.

`contextfold serve --help` lists them. Secrets (the keys of the embedding endpoint, the reranker and the
extractor) come from the environment only: an option would show in `ps`.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .access.quotas import DEFAULT_QUOTA, Quota
from .engine.ranking import DEFAULT_RANKING, Ranking
from .memory.reranker import RERANKER_APIS
from .postgres.conninfo import data_dir_problem, url_problem
from .postgres.embedded import default_data_dir
from .postgres.listener import DEFAULT_RELOAD_SECONDS
from .postgres.vector_index import OWN_INDEX_ENTRIES
from .providers.egress import DEFAULT_ALLOWED


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
    # The web console (console/): off unless a port is given.
    console_host: str
    console_port: int
    tls_cert_file: Path | None
    tls_key_file: Path | None
    tls_client_ca_file: Path | None
    max_in_flight: int
    # A tenant's share of `max_in_flight` (calls in flight at once, per worker), and the longest a unary call
    # that set no deadline runs, and a stream that moves nothing lasts.
    max_in_flight_per_tenant: int
    # Namespaces whose usage the metrics label by name (`*`: every one); the others are summed as "other".
    metrics_tenants: frozenset[str]
    max_call_seconds: float
    stream_idle_seconds: float
    # The longest one statement of a call runs, and the database connections (of a worker's pool) one
    # namespace may hold at once (None: every one).
    statement_timeout_seconds: float
    database_connections_per_tenant: int | None
    # Of each bulk worker's connections, how many one namespace's bulk calls hold at once.
    bulk_connections_per_tenant: int
    max_message_bytes: int
    max_connection_age_seconds: float
    keepalive_seconds: float
    cache_reload_seconds: float
    # "keys": every call needs an API key; "none": the service is open (for one machine).
    auth: str
    # The schema owner's URL, when requests log in as a role of their own ("": the same as database_url).
    database_migration_url: str
    # How long a worker waits at start for a database it cannot reach, then gives up (0: for as long as
    # it takes).
    database_wait_seconds: float
    # Streaming replicas of database_url that serve reads (postgres/replicas.py), how far behind one
    # may be and still serve, and how often each worker checks them.
    database_read_urls: tuple[str, ...]
    replica_max_lag_seconds: float
    replica_check_seconds: float
    # Where providers may be dialled (`providers/egress.py`): host patterns, networks, unix: paths.
    provider_targets: str
    workers: int
    # Processes that run bulk calls (`api/lanes.py`), and how much lower their CPU priority is (nice).
    bulk_workers: int
    bulk_nice: int
    model_dir: Path
    embedding_threads: int
    # The ranking of requests that name none (engine/ranking.py), and the remote reranker, if any.
    ranking: str
    reranker_url: str
    reranker_api: str
    reranker_model: str
    reranker_timeout: float
    reranker_api_key: str
    # The OpenAI-compatible chat endpoint Remember extracts facts with, if any.
    extractor_url: str
    extractor_model: str
    extractor_timeout: float
    extractor_api_key: str
    # How often expired entries are purged, and how many versions of an entry are kept.
    purge_interval_seconds: float
    versions_per_entry: int
    own_index_entries: int
    # Envoy's external processor on the gRPC port (mesh/processor.py): whether it is served, its deadline
    # for a body, the largest body it reads, and whether every answer says what it did.
    ext_proc: bool
    ext_proc_timeout: float
    ext_proc_max_body_bytes: int
    ext_proc_outcome_header: bool


# Settings read from the environment only, each with what it is: a secret on the command line would show in `ps`.
ENVIRONMENT_ONLY = {
    "CONTEXTFOLD_OPENAI_API_KEY": "the embedding endpoint's key, for --embedder openai",
    "CONTEXTFOLD_RERANKER_API_KEY": "the reranker's key, for --reranker-url",
    "CONTEXTFOLD_EXTRACTOR_API_KEY": "the extractor's key, for --extractor-url",
    "OTEL_EXPORTER_OTLP_ENDPOINT": "where spans go over OTLP/HTTP, with the other standard OTEL_* settings;"
    " unset, no spans are exported",
}


class _Options:
    """Adds options whose defaults come from `CONTEXTFOLD_<OPTION>` when that is set (`--max-in-flight`:
    CONTEXTFOLD_MAX_IN_FLIGHT), so a container is configured by its environment alone. Each option
    keeps its variable and, where the default depends on the machine, the default as documented
    (`shown`), for the configuration reference (`scripts/gen_config_docs.py`)."""

    def __init__(self, parser: argparse.ArgumentParser, environ: Mapping[str, str]) -> None:
        self._parser = parser
        self._environ = environ

    def add(
        self,
        flag: str,
        kind: Callable[[str], Any] = str,
        default: Any = None,
        help: str = "",
        shown: str | None = None,
        **extra: Any,
    ) -> None:
        variable = variable_of(flag)
        value = self._environ.get(variable)
        action = self._parser.add_argument(
            flag, type=kind, default=kind(value) if value else default, help=f"{help} (${variable})".lstrip(), **extra
        )
        documented(action, variable, shown)


def variable_of(flag: str) -> str:
    """The environment variable an option's default comes from: `--max-in-flight`, CONTEXTFOLD_MAX_IN_FLIGHT."""
    return "CONTEXTFOLD_" + flag.removeprefix("--").replace("-", "_").upper()


def documented(action: argparse.Action, variable: str, shown: str | None = None) -> None:
    """Note on `action` its environment variable and its default as the reference shows it."""
    action.environment = variable  # type: ignore[attr-defined]
    action.shown_default = shown  # type: ignore[attr-defined]


def option_parser(environ: Mapping[str, str] = os.environ) -> argparse.ArgumentParser:
    """`contextfold serve`'s options, their defaults taken from `environ` where it sets them."""
    parser = argparse.ArgumentParser(prog="contextfold serve", description="Run the contextfold gRPC server.")
    option = _Options(parser, environ).add
    option("--host", default="localhost", help="address to listen on")
    option(
        "--auth",
        default="keys",
        choices=["keys", "none"],
        help="keys: every call needs an API key (contextfold keys create); none: no keys, every caller an admin"
        " of the namespace ~open, which no key can name (for one machine: make run)",
    )
    option("--port", int, 50051, help="0 picks a free port")
    option("--database-url", default="", help="a Postgres with pgvector; without one, an embedded Postgres is started")
    option(
        "--database-migration-url",
        default="",
        help="the schema owner's URL (migrations, index builds, API keys); --database-url is then a role"
        " of its own that only reads and writes the tenants' rows (default: --database-url does both)",
    )
    option(
        "--database-wait-seconds",
        float,
        0.0,
        help="give up (exit 1) when the database cannot be reached for this long at start, for an orchestrator"
        " that would rather restart the service; meanwhile health says NOT_SERVING and each try waits twice as"
        " long as the last, up to 30 s (default 0: wait for as long as it takes)",
    )
    option(
        "--data-dir",
        Path,
        default_data_dir(),
        help="where the embedded Postgres keeps its data",
        shown="~/.local/share/contextfold/pgdata",
    )
    option(
        "--workers",
        int,
        available_cores(),
        help="server processes sharing the port, each with its own event loop (default: the cores available)",
        shown="the cores available",
    )
    option(
        "--bulk-workers",
        int,
        1,
        help="processes that run bulk calls (adds, imports, updates, Remember, exports, erasures, listings) at"
        " a lower CPU priority than the workers' queries, each with its own model and database sessions",
    )
    option(
        "--bulk-nice",
        int,
        10,
        help="how much lower the bulk workers' CPU priority is (a nice value, 0 to 19; their embedded-Postgres"
        " sessions too): where a query and bulk work both want a core, the query has it",
    )
    option("--embedder", default="local", choices=["local", "openai"])
    option(
        "--model-dir",
        Path,
        default_data_dir().parent / "models",
        help="where the local model is cached",
        shown="~/.local/share/contextfold/models",
    )
    option(
        "--embedding-threads",
        int,
        0,
        help="threads each worker's local model uses per batch, and batches a bulk worker's runs side by side,"
        " a thread each (default: the cores available, at most 4); idle ones sleep, so workers sharing cores"
        " cost little, and one query embeds in less time",
        shown="the cores available, at most 4",
    )
    option(
        "--openai-base-url",
        default="https://api.openai.com/v1",
        help="for --embedder openai: an OpenAI-compatible /embeddings API (OpenAI, Ollama, vLLM, TEI)",
    )
    option("--openai-model", default="text-embedding-3-small", help="for --embedder openai: the model asked for")
    option(
        "--ranking",
        default=DEFAULT_RANKING.value,
        choices=[ranking.value for ranking in Ranking],
        help="how results are ranked when a request does not say (docs/injection.md compares the strategies)",
    )
    option(
        "--reranker-url",
        default="",
        help="a remote reranker's endpoint (e.g. http://tei:8080/rerank), for RANKING_RERANK; its key comes"
        " from CONTEXTFOLD_RERANKER_API_KEY",
    )
    option(
        "--reranker-api",
        default="tei",
        choices=list(RERANKER_APIS),
        help="the reranker's shape: tei (Text Embeddings Inference) or cohere (Cohere, Jina, vLLM)",
    )
    option("--reranker-model", default="", help="the model the reranker is asked for (cohere shape)")
    option(
        "--reranker-timeout-ms",
        int,
        300,
        help="the longest a search waits for the reranker before keeping the store-aware order",
    )
    option(
        "--extractor-url",
        default="",
        help="an OpenAI-compatible chat API (e.g. http://vllm:8000/v1) that Remember extracts facts with when"
        " a call asks; its key comes from CONTEXTFOLD_EXTRACTOR_API_KEY",
    )
    option("--extractor-model", default="", help="the chat model the extractor is asked for")
    option("--extractor-timeout-ms", int, 30_000, help="the longest Remember waits for one extractor answer")
    option(
        "--purge-interval-seconds",
        float,
        30.0,
        help="how often expired entries are deleted (in batches); they are never returned once expired",
    )
    option(
        "--versions-per-entry",
        int,
        100,
        help="versions of an entry kept (what its updates replaced): the newest; an older one goes as one comes",
    )
    option(
        "--own-index-entries",
        int,
        OWN_INDEX_ENTRIES,
        help="a namespace's entries of one dimension get a vector index of their own from this many;"
        " below it, its searches weigh every entry",
    )
    option(
        "--metrics-tenants",
        str,
        "",
        help="namespaces whose usage the metrics label by name, comma-separated ('*': every one, when the"
        ' tenants are few); the others\' is summed under tenant="other" (`contextfold tenants show` has each)',
    )
    option(
        "--ext-proc",
        default="off",
        choices=["on", "off"],
        help="on: serve Envoy's external processor (envoy.service.ext_proc.v3) on the gRPC port, folding memory"
        " into the model requests Envoy sends it (docs/mesh.md)",
    )
    option(
        "--ext-proc-timeout-ms",
        int,
        150,
        help="the processor's deadline for a request body, below Envoy's message_timeout (200 ms by default):"
        " past it the request goes on unchanged",
    )
    option(
        "--ext-proc-max-body-bytes",
        int,
        0,
        help="the largest request body the processor reads; larger ones go on unchanged (default: the gRPC"
        " message limit, less 64 KiB)",
        shown="--max-message-bytes less 64 KiB",
    )
    option(
        "--ext-proc-outcome-header",
        default="off",
        choices=["on", "off"],
        help="on: answers carry x-contextfold-outcome, what was folded or why not (needs Envoy to send the"
        " response headers)",
    )
    option("--grace-seconds", float, 10.0, help="on stop, how long calls in flight may take to finish")
    option("--sandbox-workers", int, 2, help="processes that run callers' expressions and templates")
    option(
        "--sandbox-time-limit-ms",
        int,
        250,
        help="how long one expression or template may run before its worker is replaced",
    )
    option(
        "--provider-targets",
        default=DEFAULT_ALLOWED,
        help="where providers may be: comma-separated host patterns (*.svc.cluster.local), networks"
        " (10.0.0.0/8) and unix: socket paths; link-local and metadata addresses, the service's own ports"
        " and its database are refused whatever this says (default: loopback only)",
    )
    option("--log-level", default="INFO", help="the least severe log lines written: DEBUG, INFO, WARNING, ERROR")
    option(
        "--log-format", default="json", choices=["json", "text"], help="json: one object per line, one line per call"
    )
    option(
        "--drain-seconds",
        float,
        0.0,
        help="on SIGTERM, keep serving this long with health NOT_SERVING before refusing new calls",
    )
    option("--admin-host", default="localhost", help="where the metrics endpoint (--admin-port) listens")
    option(
        "--admin-port", int, 9464, help="serves Prometheus metrics at /metrics; 0 picks a free port, -1 turns it off"
    )
    option(
        "--console-port",
        int,
        -1,
        help="serves the web console (pages for stores, entries, an Inject playground, providers, erasure;"
        " behind the same API keys) at http://--console-host:PORT/; 0 picks a free port; -1, the default, turns it off",
    )
    option("--console-host", default="localhost", help="where the console listens (default: this machine only)")
    option("--tls-cert-file", Path, help="serve TLS with this certificate chain (PEM), with --tls-key-file")
    option(
        "--tls-key-file", Path, help="the certificate's private key (PEM); without both, plaintext (as behind a mesh)"
    )
    option("--tls-client-ca-file", Path, help="require client certificates signed by this CA (mutual TLS)")
    replicas = parser.add_argument(
        "--database-read-url",
        action="append",
        default=None,
        help="a streaming replica of --database-url to read from; repeat for several (searches, Inject's"
        " search, gets and lists go to them; writes, and the reads of a write, to the primary)"
        " ($CONTEXTFOLD_DATABASE_READ_URL: one or several, separated by spaces)",
    )
    documented(replicas, "CONTEXTFOLD_DATABASE_READ_URL")
    option(
        "--replica-max-lag-seconds",
        float,
        5.0,
        help="a read replica further behind the primary than this is not read from until it catches up",
    )
    option("--replica-check-seconds", float, 1.0, help="how often each worker checks the read replicas and their lag")
    option("--max-in-flight", int, 256, help="calls served at once; more are refused with RESOURCE_EXHAUSTED")
    option(
        "--max-in-flight-per-tenant",
        int,
        0,
        help="calls one namespace may have in flight at once, its share of --max-in-flight (default: a quarter"
        " of it; all of it when the service runs open); more are refused with RESOURCE_EXHAUSTED, the others'"
        " calls untouched",
        shown="a quarter of --max-in-flight (all of it when open)",
    )
    option(
        "--max-call-seconds",
        float,
        60.0,
        help="the longest a call that sets no deadline may run (streams excepted: see --stream-idle-seconds)",
    )
    option(
        "--statement-timeout-seconds",
        float,
        10.0,
        help="the longest one database statement of a call may run (and never past the call's deadline);"
        " one cut off at this limit is RESOURCE_EXHAUSTED (STATEMENT_TIMEOUT), one cut off by the caller's"
        " deadline DEADLINE_EXCEEDED, its transaction rolled back either way",
    )
    option(
        "--database-connections-per-tenant",
        int,
        0,
        help="database connections one namespace may hold at once, of each worker's 10 (default: 7; all of"
        " them when the service runs open)",
        shown="`7` (all 10 when open)",
    )
    option(
        "--bulk-connections-per-tenant",
        int,
        0,
        help="database connections one namespace's bulk calls may hold at once, of each bulk worker's 10"
        " (default: the cores available): statements past the cores only contend for them, slowing every"
        " tenant's queries; the others wait their turn, within the call's time",
        shown="the cores available",
    )
    option(
        "--stream-idle-seconds",
        float,
        30.0,
        help="a stream that moves nothing this long (no request comes, no answer is read) is ended",
    )
    option("--max-message-bytes", int, 4 * 1024 * 1024, help="largest request accepted")
    option(
        "--max-connection-age-seconds",
        float,
        300.0,
        help="clients reconnect after this long, so load spreads over new replicas",
    )
    option("--keepalive-seconds", float, 60.0, help="ping idle connections this often to find dead peers")
    option(
        "--cache-reload-seconds",
        float,
        DEFAULT_RELOAD_SECONDS,
        help="reread API keys and provider registrations this often, even when no change was announced",
    )
    return parser


def parse_config(argv: list[str] | None = None) -> Config:
    parser = option_parser()
    read_urls = os.environ.get("CONTEXTFOLD_DATABASE_READ_URL", "").split()
    args = parser.parse_args(argv)

    def refuse(message: str) -> None:
        """One line naming what is wrong, and exit 2 (argparse's own errors add the usage, whose length
        buries the reason)."""
        parser.exit(2, f"{parser.prog}: error: {message}\n")

    if (args.tls_cert_file is None) != (args.tls_key_file is None):
        refuse("--tls-cert-file and --tls-key-file go together")
    if args.ranking == Ranking.RERANK.value and not args.reranker_url:
        refuse("--ranking rerank needs --reranker-url")
    if (args.database_read_url or read_urls) and not args.database_url:
        refuse("--database-read-url needs --database-url: the replicas' primary (the embedded one has none)")
    if args.replica_max_lag_seconds < 0 or args.replica_check_seconds <= 0:
        refuse("--replica-max-lag-seconds must be 0 or more, --replica-check-seconds more than 0")
    if args.tls_client_ca_file is not None and args.tls_cert_file is None:
        refuse("--tls-client-ca-file needs --tls-cert-file and --tls-key-file")
    if args.database_wait_seconds < 0:
        refuse("--database-wait-seconds must be 0 (wait for as long as it takes) or more")
    given = sys.argv[1:] if argv is None else argv

    def named(flag: str) -> str:
        """`flag` when the command line gives it, else the environment variable its value came from."""
        return flag if any(word == flag or word.startswith(flag + "=") for word in given) else variable_of(flag)

    if problem := data_dir_problem(args.data_dir, named("--data-dir")):
        refuse(problem)
    urls = [
        ("--database-url", [args.database_url]),
        ("--database-migration-url", [args.database_migration_url]),
        ("--database-read-url", args.database_read_url if args.database_read_url is not None else read_urls),
    ]
    for flag, values in urls:
        for url in values:
            if url and (problem := url_problem(url)):
                refuse(f"{named(flag)} is not a database URL libpq can read: {problem}")
    return Config(
        host=args.host,
        port=args.port,
        database_url=args.database_url,
        data_dir=args.data_dir,
        embedder=args.embedder,
        openai_base_url=args.openai_base_url,
        openai_model=args.openai_model,
        # A key on the command line would show in `ps`: it comes from the environment only.
        openai_api_key=os.environ.get("CONTEXTFOLD_OPENAI_API_KEY", ""),
        grace_seconds=args.grace_seconds,
        sandbox_workers=max(1, args.sandbox_workers),
        sandbox_time_limit=max(1, args.sandbox_time_limit_ms) / 1000,
        log_level=args.log_level,
        log_format=args.log_format,
        drain_seconds=max(0.0, args.drain_seconds),
        admin_host=args.admin_host,
        admin_port=args.admin_port,
        console_host=args.console_host,
        console_port=args.console_port,
        tls_cert_file=args.tls_cert_file,
        tls_key_file=args.tls_key_file,
        tls_client_ca_file=args.tls_client_ca_file,
        max_in_flight=max(1, args.max_in_flight),
        # An open service has one namespace: its share is the whole.
        max_in_flight_per_tenant=args.max_in_flight_per_tenant
        or (args.max_in_flight if args.auth == "none" else max(1, args.max_in_flight // 4)),
        # Open, the service has one namespace: it is labelled.
        metrics_tenants=frozenset(name.strip() for name in args.metrics_tenants.split(",") if name.strip())
        or frozenset({"*"} if args.auth == "none" else ()),
        max_call_seconds=max(0.1, args.max_call_seconds),
        stream_idle_seconds=max(0.1, args.stream_idle_seconds),
        statement_timeout_seconds=max(0.01, args.statement_timeout_seconds),
        database_connections_per_tenant=args.database_connections_per_tenant or (None if args.auth == "none" else 7),
        bulk_connections_per_tenant=min(10, args.bulk_connections_per_tenant or available_cores()),
        max_message_bytes=max(1024, args.max_message_bytes),
        max_connection_age_seconds=args.max_connection_age_seconds,
        keepalive_seconds=args.keepalive_seconds,
        cache_reload_seconds=max(0.1, args.cache_reload_seconds),
        auth=args.auth,
        database_migration_url=args.database_migration_url,
        database_wait_seconds=args.database_wait_seconds,
        database_read_urls=tuple(args.database_read_url if args.database_read_url is not None else read_urls),
        replica_max_lag_seconds=args.replica_max_lag_seconds,
        replica_check_seconds=args.replica_check_seconds,
        provider_targets=args.provider_targets,
        workers=max(1, args.workers),
        bulk_workers=max(1, args.bulk_workers),
        bulk_nice=min(19, max(0, args.bulk_nice)),
        model_dir=args.model_dir,
        embedding_threads=args.embedding_threads or min(available_cores(), 4),
        ranking=args.ranking,
        reranker_url=args.reranker_url,
        reranker_api=args.reranker_api,
        reranker_model=args.reranker_model,
        reranker_timeout=max(1, args.reranker_timeout_ms) / 1000,
        reranker_api_key=os.environ.get("CONTEXTFOLD_RERANKER_API_KEY", ""),
        extractor_url=args.extractor_url,
        extractor_model=args.extractor_model,
        extractor_timeout=max(1, args.extractor_timeout_ms) / 1000,
        extractor_api_key=os.environ.get("CONTEXTFOLD_EXTRACTOR_API_KEY", ""),
        purge_interval_seconds=max(0.05, args.purge_interval_seconds),
        versions_per_entry=max(1, args.versions_per_entry),
        own_index_entries=max(1, args.own_index_entries),
        ext_proc=args.ext_proc == "on",
        ext_proc_timeout=max(1, args.ext_proc_timeout_ms) / 1000,
        ext_proc_max_body_bytes=args.ext_proc_max_body_bytes or max(1, args.max_message_bytes - 64 * 1024),
        ext_proc_outcome_header=args.ext_proc_outcome_header == "on",
    )


def available_cores() -> int:
    """The cores this process may use: its CPU affinity (a container's cpuset), within its cgroup's
    CPU quota (a Kubernetes CPU limit), rounded up."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()
    except (OSError, ValueError):
        return cores
    return cores if quota == "max" else max(1, min(cores, math.ceil(int(quota) / int(period))))


def default_quota(config: Config) -> Quota:
    """The quota of a namespace the operator set none for: the server's defaults, with its versions."""
    return dataclasses.replace(DEFAULT_QUOTA, versions_per_entry=config.versions_per_entry)
