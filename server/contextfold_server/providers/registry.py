"""Provider registrations: kept in Postgres, cached on every replica, refreshed by LISTEN/NOTIFY.

Every change is announced on the `contextfold_providers` channel in the same
transaction that makes it, so each replica reloads that namespace within
moments. `Inject` reads the cache and never waits on the database for it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from ..database import Database
from ..engine.injection import ProviderSpec
from ..engine.trigger import Trigger
from ..errors import AlreadyExists, NotFound
from ..memory.schema import SCHEMA

logger = logging.getLogger(__name__)

CHANNEL = "contextfold_providers"
_COLUMNS = (
    "name, target, trigger, trigger_expression, priority, timeout_ms, max_tokens, enabled, seq,"
    " create_time, update_time"
)


@dataclass(frozen=True)
class ProviderRecord:
    name: str
    target: str
    trigger: Trigger
    trigger_expression: str
    priority: int
    timeout_ms: int
    max_tokens: int
    enabled: bool
    seq: int
    create_time: datetime
    update_time: datetime

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> ProviderRecord:
        return cls(**{**row, "trigger": Trigger(row["trigger"])})

    def spec(self) -> ProviderSpec:
        return ProviderSpec(
            name=self.name,
            trigger=self.trigger,
            trigger_expression=self.trigger_expression,
            priority=self.priority,
            order=self.seq,
            timeout=self.timeout_ms / 1000,
            max_tokens=self.max_tokens,
            enabled=self.enabled,
        )


class ProviderRepository:
    def __init__(self, database: Database) -> None:
        self._database = database

    async def register(self, namespace: str, fields: dict[str, Any]) -> ProviderRecord:
        async with self._database.connection() as conn, conn.transaction():
            cursor = await conn.execute(
                f"INSERT INTO {SCHEMA}.providers (namespace, name, target, trigger, trigger_expression, priority,"
                " timeout_ms, max_tokens, enabled) VALUES (%(namespace)s, %(name)s, %(target)s, %(trigger)s,"
                " %(trigger_expression)s, %(priority)s, %(timeout_ms)s, %(max_tokens)s, %(enabled)s)"
                f" ON CONFLICT DO NOTHING RETURNING {_COLUMNS}",
                {**fields, "namespace": namespace, "trigger": fields["trigger"].value},
            )
            row = await cursor.fetchone()
            if row is None:
                raise AlreadyExists("provider", fields["name"])
            await _announce(conn, namespace)
            return ProviderRecord.from_row(row)

    async def get(self, namespace: str, name: str) -> ProviderRecord:
        async with self._database.connection() as conn:
            cursor = await conn.execute(
                f"SELECT {_COLUMNS} FROM {SCHEMA}.providers WHERE namespace = %s AND name = %s", (namespace, name)
            )
            row = await cursor.fetchone()
        if row is None:
            raise NotFound("provider", name)
        return ProviderRecord.from_row(row)

    async def list(self, namespace: str, after: tuple[int, int] | None, limit: int) -> list[ProviderRecord]:
        """By priority (highest first), then registration; `after` is the (priority, seq) a page ended on."""
        priority, seq = after if after else (2**31, 0)
        async with self._database.connection() as conn:
            cursor = await conn.execute(
                f"SELECT {_COLUMNS} FROM {SCHEMA}.providers WHERE namespace = %s"
                " AND (priority < %s OR (priority = %s AND seq > %s)) ORDER BY priority DESC, seq LIMIT %s",
                (namespace, priority, priority, seq, limit),
            )
            return [ProviderRecord.from_row(row) for row in await cursor.fetchall()]

    async def all(self, namespace: str | None = None) -> dict[str, list[ProviderRecord]]:
        """Every registration, by namespace; one namespace's when given."""
        async with self._database.connection() as conn:
            cursor = await conn.execute(
                f"SELECT namespace, {_COLUMNS} FROM {SCHEMA}.providers"
                " WHERE %(namespace)s::text IS NULL OR namespace = %(namespace)s ORDER BY priority DESC, seq",
                {"namespace": namespace},
            )
            by_namespace: dict[str, list[ProviderRecord]] = {}
            for row in await cursor.fetchall():
                by_namespace.setdefault(row.pop("namespace"), []).append(ProviderRecord.from_row(row))
            return by_namespace

    async def update(self, namespace: str, name: str, changes: dict[str, Any]) -> ProviderRecord:
        assignments = ", ".join(f"{column} = %({column})s" for column in changes)
        values = {key: value.value if isinstance(value, Trigger) else value for key, value in changes.items()}
        async with self._database.connection() as conn, conn.transaction():
            cursor = await conn.execute(
                f"UPDATE {SCHEMA}.providers SET {assignments}{', ' if assignments else ''}update_time = now()"
                f" WHERE namespace = %(namespace)s AND name = %(name)s RETURNING {_COLUMNS}",
                {**values, "namespace": namespace, "name": name},
            )
            row = await cursor.fetchone()
            if row is None:
                raise NotFound("provider", name)
            await _announce(conn, namespace)
            return ProviderRecord.from_row(row)

    async def delete(self, namespace: str, name: str) -> None:
        async with self._database.connection() as conn, conn.transaction():
            cursor = await conn.execute(
                f"DELETE FROM {SCHEMA}.providers WHERE namespace = %s AND name = %s RETURNING name", (namespace, name)
            )
            if await cursor.fetchone() is None:
                raise NotFound("provider", name)
            await _announce(conn, namespace)


async def _announce(conn: psycopg.AsyncConnection, namespace: str) -> None:
    # Delivered on commit, and only then: a rolled-back change announces nothing.
    await conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, namespace))


class ProviderDirectory:
    """This replica's view of every namespace's providers, kept current by LISTEN/NOTIFY."""

    def __init__(
        self,
        repository: ProviderRepository,
        conninfo: str,
        on_refresh: Callable[[set[str]], Awaitable[None]] | None = None,
    ) -> None:
        self._repository = repository
        self._conninfo = conninfo
        # Told the targets still registered after each refresh, e.g. to close unused channels.
        self._on_refresh = on_refresh
        self._providers: dict[str, list[ProviderRecord]] = {}
        self._listening = asyncio.Event()
        self._listener: asyncio.Task | None = None

    async def start(self, timeout: float = 30.0) -> None:
        self._listener = asyncio.create_task(self._listen(), name="provider-directory")
        await asyncio.wait_for(self._listening.wait(), timeout)

    async def close(self) -> None:
        if self._listener is not None:
            self._listener.cancel()
            await asyncio.gather(self._listener, return_exceptions=True)

    def providers(self, namespace: str) -> list[ProviderRecord]:
        """The namespace's providers, by priority (highest first), then registration."""
        return self._providers.get(namespace, [])

    def select(self, namespace: str, names: Sequence[str]) -> tuple[list[ProviderRecord], list[str]]:
        """The providers `Inject` asks: the named ones (and the names not registered), or every enabled one."""
        registered = self.providers(namespace)
        if not names:
            return [record for record in registered if record.enabled], []
        by_name = {record.name: record for record in registered}
        return [by_name[name] for name in names if name in by_name], [name for name in names if name not in by_name]

    def targets(self) -> set[str]:
        return {record.target for records in self._providers.values() for record in records}

    async def refresh(self, namespace: str | None = None) -> None:
        loaded = await self._repository.all(namespace)
        if namespace is None:
            self._providers = loaded
        else:
            self._providers[namespace] = loaded.get(namespace, [])
        if self._on_refresh is not None:
            await self._on_refresh(self.targets())

    async def _listen(self) -> None:
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(self._conninfo, autocommit=True) as conn:
                    await conn.execute(f"LISTEN {CHANNEL}")
                    # Listening first, then loading, so no change falls between the two.
                    await self.refresh()
                    self._listening.set()
                    async for notice in conn.notifies():
                        await self.refresh(notice.payload)
            except asyncio.CancelledError:
                raise
            except Exception as error:  # noqa: BLE001 - keep listening: reconnect and reload.
                logger.warning("reason=<%s> | provider directory lost its connection | reconnecting", error)
                await asyncio.sleep(1.0)
