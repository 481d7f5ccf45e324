"""Read your writes across the primary and its read replicas: one call's position in the WAL, the
sealed token that carries it to the caller, and when the call's database work must end.

A call that writes learns where its commit lies in the primary's write-ahead log; the pipeline
hands that position to the caller as a token (trailing metadata `x-contextfold-read-after`), and
the client libraries send the greatest token they hold with every later call. A read goes to a
replica only when the replica has replayed at least that far, so a caller always sees its own
writes, however far behind a replica runs.

A token tells its holder nothing of anyone's writes. The WAL position is every tenant's: two of
one tenant's tokens in clear would tell it how much the others wrote between them. So the position
is sealed (`access/sealing.py`) with a key of the namespace's own, derived from the service's
secret: a token opens only for the namespace it was issued to, and nobody can make one, so no token
can ask a read for a position no write of that namespace reached. Every token has the same
length; before the sealed part it carries, in clear, the primary's clock when the position was read
(microseconds, 16 hexadecimal digits), so the greater token as text is the later write, in any
language: the clock is read before the position, in the statement that reads both, so a token
whose time is greater also holds a position past the other's commit.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections import OrderedDict
from contextvars import ContextVar
from dataclasses import dataclass

from ..access.sealing import Sealer

TOKEN_HEADER = "x-contextfold-read-after"
_LSN = re.compile(r"([0-9A-Fa-f]{1,8})/([0-9A-Fa-f]{1,8})")
# A token's clock in clear; and the whole of a token of earlier releases (the position in clear), read as
# no token, so a client that kept one across an upgrade goes on working (its next write brings a new one).
_SIXTEEN_HEX = re.compile(r"[0-9a-f]{16}")
# The primary's clock and its position, the clock read first (a subquery of its own is evaluated first).
POSITION_NOW = (
    "SELECT t.at, pg_current_wal_lsn()::text AS lsn FROM"
    " (SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint AS at OFFSET 0) AS t"
)


@dataclass
class CallPosition:
    """One call's reads and writes: how far its reads must see, how far its writes reach, and
    which database answered its last read. Each position comes with the primary's clock when it was
    read (microseconds)."""

    read_after: int = 0
    read_after_at: int = 0
    # Whether reads may go to a replica: only for calls that change nothing.
    replicas_allowed: bool = False
    # When the call's database work must be done (the event loop's clock), or None: no statement of it
    # runs past this, nor past the server's longest statement.
    deadline: float | None = None
    written: int = 0
    written_at: int = 0
    answered_by: str = ""

    def wrote(self, position: int, at: int) -> None:
        if position > self.written:
            self.written, self.written_at = position, at


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


class ReadAfterTokens:
    """Makes and opens read-after tokens, each sealed with a key of its namespace's own."""

    # Namespaces whose sealers are kept (deriving one costs two HMACs; a busy server sees the same few).
    _KEPT = 1024

    def __init__(self, secret: bytes) -> None:
        self._secret = secret
        self._sealers: OrderedDict[str, Sealer] = OrderedDict()

    def _sealer(self, namespace: str) -> Sealer:
        sealer = self._sealers.get(namespace)
        if sealer is None:
            sealer = self._sealers[namespace] = Sealer(self._secret, f"read-after tokens of {namespace}")
            if len(self._sealers) > self._KEPT:
                self._sealers.popitem(last=False)
        self._sealers.move_to_end(namespace)
        return sealer

    def token(self, namespace: str, position: int, at: int) -> str:
        """The token of a write of `namespace` whose commit lies before `position`, read at `at`."""
        sealed = self._sealer(namespace).seal(position.to_bytes(8, "big") + at.to_bytes(8, "big"))
        return f"{at:016x}" + base64.urlsafe_b64encode(sealed).decode().rstrip("=")

    def open(self, namespace: str, token: str) -> tuple[int, int] | None:
        """The position a token of `namespace` names and the time it was read; (0, 0) for a token of an
        earlier release; None when it is not a token issued to `namespace`."""
        if _SIXTEEN_HEX.fullmatch(token):
            return 0, 0
        shown, sealed = token[:16], token[16:]
        if not _SIXTEEN_HEX.fullmatch(shown) or not sealed.isascii():
            return None
        try:
            plain = self._sealer(namespace).open(base64.urlsafe_b64decode(sealed + "=" * (-len(sealed) % 4)))
        except (ValueError, binascii.Error):
            return None
        position, at = int.from_bytes(plain[:8], "big"), int.from_bytes(plain[8:], "big")
        return (position, at) if len(plain) == 16 and at == int(shown, 16) else None
