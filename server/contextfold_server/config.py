"""The server's configuration: command-line options, each with an environment variable of its own.

`contextfold serve --help` lists them. Secrets (the embedding endpoint's key) come
from the environment only: an option would show in `ps`.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path

from .postgres.embedded import default_data_dir
from .postgres.listener import DEFAULT_RELOAD_SECONDS


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
    cache_reload_seconds: float


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
    parser.add_argument(
        "--cache-reload-seconds",
        type=float,
        default=float(env("CONTEXTFOLD_CACHE_RELOAD_SECONDS", str(DEFAULT_RELOAD_SECONDS))),
        help="reread API keys and provider registrations this often, even when no change was announced",
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
        cache_reload_seconds=max(0.1, args.cache_reload_seconds),
    )
