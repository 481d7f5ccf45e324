"""Structured logs: one JSON object per line, and one line per call (never a message body).

What callers cause (a failing template, a provider that errs, a request gRPC
cannot decode) is logged once per kind per minute, with a count of the lines held
back and never a traceback: a caller must not be able to flood the log.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections import OrderedDict
from datetime import UTC, datetime
from typing import Any

calls = logging.getLogger("contextfold.calls")

THROTTLE_SECONDS = 60.0
# Kinds remembered at most: the oldest is forgotten first (and may log again).
_KINDS_KEPT = 1024
# gRPC's own logger, which writes an error with a traceback for each request it cannot decode
# (health and reflection calls; contextfold's own calls are decoded by contextfold).
_GRPC_LOGGERS = ("grpc._cython.cygrpc", "grpc.aio._server", "grpc._server")


class Throttle:
    """Whether a line of one kind may be written now: once per `interval`, with the count held back."""

    def __init__(self, interval: float = THROTTLE_SECONDS) -> None:
        self._interval = interval
        # Each kind: when it was last written, and how many lines of it were held back since.
        self._kinds: OrderedDict[str, tuple[float, int]] = OrderedDict()

    def admit(self, kind: str) -> int | None:
        """None to hold the line back; else how many lines of its kind were held back before it."""
        now = time.monotonic()
        last = self._kinds.get(kind)
        if last is not None and now - last[0] < self._interval:
            self._kinds[kind] = (last[0], last[1] + 1)
            return None
        self._kinds[kind] = (now, 0)
        self._kinds.move_to_end(kind)
        while len(self._kinds) > _KINDS_KEPT:
            self._kinds.popitem(last=False)
        return 0 if last is None else last[1]


_throttle = Throttle()


def warn_throttled(logger: logging.Logger, kind: str, message: str, *args: Any) -> None:
    """A warning about something a caller caused: once per kind per minute, without a traceback."""
    held = _throttle.admit(f"{logger.name}:{kind}")
    if held is not None:
        logger.warning(message + (f" | {held} more like it held back" if held else ""), *args)


class _CallerCausedErrors(logging.Filter):
    """gRPC's own error lines about requests: once per kind per minute, without the traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        held = _throttle.admit(f"{record.name}:{record.msg}")
        if held is None:
            return False
        record.exc_info = record.exc_text = None
        if held:
            record.msg = f"{record.msg} | {held} more like it held back"
        return True


class JsonFormatter(logging.Formatter):
    def __init__(self, worker: int | str | None) -> None:
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


def configure_logging(level: str, format: str, worker: int | str | None = None) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if format == "json":
        handler.setFormatter(JsonFormatter(worker))
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)
    for noisy in ("httpx", "pgserver", "psycopg.pool", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    for name in _GRPC_LOGGERS:
        logging.getLogger(name).addFilter(_CallerCausedErrors())


def log_call(**fields: Any) -> None:
    """The one line a call leaves: method, status, duration, request id, caller; no bodies."""
    calls.info("call", extra={"fields": fields})
