"""The embedded Postgres (with pgvector) used when no database URL is given."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

logger = logging.getLogger(__name__)


def default_data_dir() -> Path:
    import platformdirs

    return Path(platformdirs.user_data_dir("contextfold")) / "pgdata"


def start_embedded_postgres(data_dir: Path) -> str:
    """Start (or join) the Postgres kept in `data_dir` and return its connection URL.

    The data directory survives restarts; the server is stopped when this
    process exits. It listens on a Unix socket only, never on a network port.
    """
    with warnings.catch_warnings():
        # pgserver keeps its lock file in the user's runtime dir and warns when
        # XDG_RUNTIME_DIR is unset, as it is for services; its fallback is fine.
        warnings.simplefilter("ignore")
        import pgserver

    data_dir.parent.mkdir(parents=True, exist_ok=True)
    server = pgserver.get_server(data_dir, cleanup_mode="stop")
    logger.info("embedded Postgres ready | data_dir=<%s>", data_dir)
    return server.get_uri()
