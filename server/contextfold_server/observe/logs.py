"""Structured logs: one JSON object per line, and one line per call (never a message body)."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

calls = logging.getLogger("contextfold.calls")


class JsonFormatter(logging.Formatter):
    def __init__(self, worker: int | None) -> None:
        super().__init__()
        # Which worker process wrote the line; None in the supervisor.
        self._worker = worker

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if self._worker is not None:
            entry["worker"] = self._worker
        entry.update(getattr(record, "fields", {}))
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


def configure_logging(level: str, format: str, worker: int | None = None) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if format == "json":
        handler.setFormatter(JsonFormatter(worker))
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)
    for noisy in ("httpx", "pgserver", "psycopg.pool", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def log_call(**fields: Any) -> None:
    """The one line a call leaves: method, status, duration, request id, caller; no bodies."""
    calls.info("call", extra={"fields": fields})
