"""Usage per tenant: what each namespace did, counted in each worker and added to the database.

Calls by method, texts the model embedded for it, tokens injected into its conversations: counted
in memory as they happen (and told to the metrics, which label by namespace only the tenants the
operator names: series that grow with the tenants would swamp the metrics store), and added every
`interval` seconds, and at the worker's stop, to `tenant_activity` on
the owner's connection, where `contextfold tenants show` reads them. A flush that fails keeps its
counts for the next.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable

import psycopg

from ..postgres.schema import SCHEMA

logger = logging.getLogger(__name__)

FLUSH_SECONDS = 10.0


class Flushed:
    """Counts kept in a worker and added to the database every `interval` seconds by `flush`, and once
    more as the worker stops."""

    def __init__(self, conninfo: str, interval: float, name: str) -> None:
        self._conninfo = conninfo
        self._interval = interval
        self._name = name
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._flushing(), name=self._name)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self.flush()

    async def _flushing(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            await self.flush()

    async def flush(self) -> None:
        raise NotImplementedError


class UsageCounters(Flushed):
    def __init__(
        self,
        conninfo: str,
        interval: float = FLUSH_SECONDS,
        observe: Callable[[str, str, int], None] = lambda namespace, kind, amount: None,
    ) -> None:
        super().__init__(conninfo, interval, "usage")
        self._observe = observe
        self._counts: Counter[tuple[str, str]] = Counter()

    def count(self, namespace: str, kind: str, amount: int = 1) -> None:
        if amount:
            self._counts[(namespace, kind)] += amount
            self._observe(namespace, kind, amount)

    async def flush(self) -> None:
        """Add what was counted since the last flush; on failure, keep it for the next."""
        counts, self._counts = self._counts, Counter()
        if not counts:
            return
        try:
            async with await psycopg.AsyncConnection.connect(self._conninfo, autocommit=True) as conn:
                await conn.execute(
                    f"INSERT INTO {SCHEMA}.tenant_activity AS a (namespace, kind, count)"
                    " SELECT * FROM unnest(%s::text[], %s::text[], %s::bigint[])"
                    " ON CONFLICT (namespace, kind) DO UPDATE SET count = a.count + excluded.count",
                    ([n for n, _ in counts], [k for _, k in counts], list(counts.values())),
                )
        except (psycopg.Error, OSError) as error:
            self._counts.update(counts)
            logger.warning("reason=<%s> | usage not recorded | kept for the next flush", error)
