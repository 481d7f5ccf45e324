"""Reads on Postgres' streaming replicas, writes on the primary.

`Databases` stands where the primary's `Database` would: writes, and reads inside a write's
transaction (`connection`), go to the primary; reads (`read`) go to a read replica when one can
serve them, else to the primary. Only the reads of calls that change nothing go to replicas; a
write's reads (what it checks before writing) are on the primary. A replica serves a read when
its last check (every `check_seconds`, by each worker) found it in recovery, no further behind
than `max_lag` seconds, and replayed past the call's position (consistency.py: the caller's
token, and the call's own writes). A replica that fails a read is left out until a check finds
it well again, and the read goes to the primary, so a replica that stops costs nothing but its
load. Replicas never receive DDL: migrations and index builds run on the primary, whose changes
the replicas replay.

Lag is measured against the primary's position as each check found it: a replica that has
replayed all the primary had written is not behind, however long ago it last replayed (an idle
primary); one that has not is behind by the time since the oldest check whose position it has
not replayed yet (to within a check's interval).
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg

from ..errors import Unavailable
from .consistency import CALL_POSITION, POSITION_NOW, CallPosition, lsn_value
from .pool import Database, NamespaceConnection, Params, PoolLimits, Query, Read

logger = logging.getLogger(__name__)

PRIMARY = "primary"
# How long a check waits for a database's answer before counting it as down.
CHECK_TIMEOUT = 2.0


@dataclass
class Replica:
    name: str
    database: Database
    # What the last check found; a replica is unused until a check finds it well.
    usable: bool = False
    replayed: int = 0
    lag: float = math.inf

    def serves(self, position: int, max_lag: float) -> bool:
        return self.usable and self.lag <= max_lag and self.replayed >= position


class Databases:
    """The primary and its read replicas, as one `Database` for the adapters."""

    def __init__(
        self,
        primary: Database,
        replicas: Sequence[Replica] = (),
        max_lag: float = 5.0,
        check_seconds: float = 1.0,
        observe: Callable[[Replica], None] = lambda replica: None,
        count_read: Callable[[str], None] = lambda database: None,
    ) -> None:
        self.primary = primary
        self.replicas = list(replicas)
        self._max_lag = max_lag
        self._check_seconds = check_seconds
        self._observe = observe
        self._count_read = count_read
        self._turns = itertools.count()

        # The primary's position at each recent check, oldest first, as long as a replica lacks it.
        self._positions: collections.deque[tuple[float, int]] = collections.deque(maxlen=10_000)
        # The primary's clock and position at the last check that read them (microseconds, WAL position).
        self._primary_at = (0, 0)

    @classmethod
    async def open(
        cls, primary: Database, urls: Sequence[str], session_settings: str, limits: PoolLimits, **options: Any
    ) -> Databases:
        """The replicas' pools (with the primary's `limits`), connecting in the background (a replica that
        is down at start is left out until it answers a check)."""
        replicas = [
            Replica(
                f"replica-{number}", await Database.open(url, session_settings, min_size=1, wait=False, limits=limits)
            )
            for number, url in enumerate(urls, start=1)
        ]
        primary.track_writes = bool(replicas)
        return cls(primary, replicas, **options)

    async def close(self) -> None:
        for replica in self.replicas:
            await replica.database.close()

    # The primary's part: writes, and what must run there.

    def connection(self, namespace: str) -> NamespaceConnection:
        return self.primary.connection(namespace)

    # Reads.

    def _chosen(self) -> Replica | None:
        """A replica that can serve this call's reads, taken in turn; None: the primary."""
        call = CALL_POSITION.get()
        if not self.replicas or call is None or not call.replicas_allowed:
            return None
        position = max(self._reached(call), call.written)
        start = next(self._turns)
        for offset in range(len(self.replicas)):
            replica = self.replicas[(start + offset) % len(self.replicas)]
            if replica.serves(position, self._max_lag):
                return replica
        return None

    def _reached(self, call: CallPosition) -> int:
        """The position the caller's token asks the reads to see, capped at what the primary had reached at
        a check after the token was issued: only a primary that changed (a standby promoted before it had
        replayed that far) has not, and its reads must not wait for a position it may never reach."""
        at, reached = self._primary_at
        if call.read_after > reached and at >= call.read_after_at > 0:
            return reached
        return call.read_after

    def _answered(self, name: str) -> None:
        call = CALL_POSITION.get()
        if call is not None:
            call.answered_by = name
        self._count_read(name)

    async def read(
        self, namespace: str, query: Query, params: Params, settings: Mapping[str, str] | None = None
    ) -> list[dict[str, Any]]:
        """One read's rows, from a replica that can serve it, else from the primary."""
        (rows,) = await self.read_all(namespace, [Read(query, params, settings)])
        return rows

    async def read_all(
        self, namespace: str, reads: Sequence[Read], apart: Sequence[int] = ()
    ) -> list[list[dict[str, Any]]]:
        """The rows of each of `reads` in one transaction, or split at the places `apart` names over connections
        side by side while they are spare (`Database.read_all`), from a replica that can serve them, else from the
        primary."""
        replica = self._chosen()
        if replica is not None:
            try:
                found = await replica.database.read_all(namespace, reads, apart)
            except (Unavailable, psycopg.Error) as error:
                self._failed(replica, error)
            else:
                self._answered(replica.name)
                return found
        found = await self.primary.read_all(namespace, reads, apart)
        self._answered(PRIMARY)
        return found

    def _failed(self, replica: Replica, error: Exception) -> None:
        """A read the replica failed goes to the primary; a replica that is down waits for a check."""
        if isinstance(error, Unavailable | psycopg.OperationalError):
            replica.usable = False
            self._observe(replica)
        logger.warning(
            "replica=<%s> reason=<%s> | a read on a replica failed | read on the primary", replica.name, error
        )

    # Checks.

    async def watch(self) -> None:
        """Check the replicas every `check_seconds`, for as long as the server runs (after the first
        check, which the server awaits at start so its first reads can use them)."""
        while True:
            await asyncio.sleep(self._check_seconds)
            await self.check_replicas()

    async def check_replicas(self) -> None:
        if not self.replicas:
            return
        try:
            async with asyncio.timeout(CHECK_TIMEOUT):
                (row,) = await self.primary.read("", POSITION_NOW, ())
            self._primary_at = (int(row["at"]), lsn_value(row["lsn"]))
            self._positions.append((time.monotonic(), self._primary_at[1]))
        except (Unavailable, psycopg.Error, TimeoutError):
            pass  # the primary's position unknown: lags are measured against what was known
        await asyncio.gather(*(self._check(replica) for replica in self.replicas))
        replayed = min(replica.replayed for replica in self.replicas)
        while len(self._positions) > 1 and self._positions[0][1] <= replayed:
            self._positions.popleft()

    def _lag(self, replayed: int) -> float:
        """Seconds since the oldest known position of the primary's that `replayed` falls short of."""
        missing = next((at for at, position in self._positions if position > replayed), None)
        return 0.0 if missing is None else time.monotonic() - missing

    async def _check(self, replica: Replica) -> None:
        was = replica.usable
        try:
            async with asyncio.timeout(CHECK_TIMEOUT):
                (row,) = await replica.database.read("", _REPLICA_STATE, ())
        except (Unavailable, psycopg.Error, TimeoutError) as error:
            replica.usable, replica.lag = False, math.inf
            if was:
                logger.warning(
                    "replica=<%s> reason=<%s> | read replica unreachable | reads go elsewhere", replica.name, error
                )
        else:
            if not row["standby"]:
                replica.usable, replica.lag = False, math.inf
                if was:
                    logger.warning(
                        "replica=<%s> | no longer in recovery (promoted?) | not used for reads", replica.name
                    )
            else:
                replica.replayed = lsn_value(row["replayed"]) if row["replayed"] else 0
                replica.lag = self._lag(replica.replayed)
                replica.usable = True
                if not was:
                    logger.info("replica=<%s> lag_seconds=<%.3f> | read replica in use", replica.name, replica.lag)
        self._observe(replica)


_REPLICA_STATE = "SELECT pg_is_in_recovery() AS standby, pg_last_wal_replay_lsn()::text AS replayed"
