"""Read your writes across the primary and its read replicas: one call's position in the WAL, and when
its database work must end.

A call that writes learns where its commit lies in the primary's write-ahead log; the pipeline
hands that position to the caller as a token (trailing metadata `x-contextfold-read-after`), and
the client libraries send the highest token they hold with every later call. A read goes to a
replica only when the replica has replayed at least that far, so a caller always sees its own
writes, however far behind a replica runs. Tokens are the position as 16 hexadecimal digits, so
that the greater token (as text) is the later position, in any language.
"""

from __future__ import annotations

import re
from contextvars import ContextVar
from dataclasses import dataclass

TOKEN_HEADER = "x-contextfold-read-after"
_TOKEN = re.compile(r"[0-9a-f]{16}")
_LSN = re.compile(r"([0-9A-Fa-f]{1,8})/([0-9A-Fa-f]{1,8})")


@dataclass
class CallPosition:
    """One call's reads and writes: how far its reads must see, how far its writes reach, and
    which database answered its last read."""

    read_after: int = 0
    # Whether reads may go to a replica: only for calls that change nothing.
    replicas_allowed: bool = False
    # When the call's database work must be done (the event loop's clock), or None: no statement of it
    # runs past this, nor past the server's longest statement.
    deadline: float | None = None
    written: int = 0
    answered_by: str = ""

    def needed(self) -> int:
        """The WAL position a database must have replayed to serve this call's reads."""
        return max(self.read_after, self.written)

    def wrote(self, position: int) -> None:
        self.written = max(self.written, position)


# Set by the call pipeline for each call; None outside calls (background work reads the primary).
CALL_POSITION: ContextVar[CallPosition | None] = ContextVar("call_position", default=None)


def answered_by() -> str:
    """The database that answered the current call's last read; empty when it read none."""
    position = CALL_POSITION.get()
    return position.answered_by if position is not None else ""


def lsn_value(text: str) -> int:
    """A `pg_lsn` as Postgres prints it (`16/B374D848`), as a number."""
    match = _LSN.fullmatch(text)
    if match is None:
        raise ValueError(f"not a WAL position: {text!r}")
    return int(match.group(1), 16) << 32 | int(match.group(2), 16)


def lsn_text(value: int) -> str:
    """A number as the `pg_lsn` text Postgres reads."""
    return f"{value >> 32:X}/{value & 0xFFFFFFFF:X}"


def token(position: int) -> str:
    return f"{position:016x}"


def parse_token(text: str) -> int | None:
    """The position a token names; None when it is not one."""
    return int(text, 16) if _TOKEN.fullmatch(text) else None
