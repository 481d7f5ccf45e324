"""Provider registrations: kept in Postgres, cached on every replica, refreshed by LISTEN/NOTIFY.

Every change is announced on the `contextfold_providers` channel in the same
transaction that makes it, so each replica reloads that namespace within
moments. `Inject` reads the cache and never waits on the database for it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ..access.quotas import DEFAULT_QUOTA, Quota, over_quota
from ..access.sealing import Sealer
from ..engine.injection import ProviderSpec
from ..engine.trigger import Trigger
from ..errors import AlreadyExists, NotFound
from ..postgres.listener import ChangeListener
from ..postgres.pool import Connection, Database
from ..postgres.schema import SCHEMA
from .fanout import Route, TlsSettings
from .outcomes import OutcomeCount

CHANNEL = "contextfold_providers"
_COLUMNS = (
    "name, target, trigger, trigger_expression, priority, timeout_ms, max_tokens, enabled, seq,"
    " create_time, update_time, tls, tls_ca, tls_cert, tls_server_name, tls_key_sealed, credential_header,"
    " credential_sealed"
)
# Read with a registration for those who manage it (GetProvider, ListProviders): its calls' outcomes.
_OUTCOMES = (
    "(SELECT coalesce(json_agg(json_build_object('outcome', o.outcome, 'count', o.count, 'last_time', o.last_time,"
    " 'last_detail', o.last_detail) ORDER BY o.count DESC, o.outcome), '[]')"
    f" FROM {SCHEMA}.provider_outcomes o WHERE o.namespace = p.namespace AND o.provider = p.name) AS outcomes"
)
# Columns whose values are sealed (`access/sealing.py`), by the field that holds them in the clear.
_SEALED = {"tls_key": "tls_key_sealed", "credential_value": "credential_sealed"}


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
    tls: bool = False
    tls_ca: str = ""
    tls_cert: str = ""
    tls_server_name: str = ""
    credential_header: str = ""
    # Secrets, opened from their sealed columns: never returned to callers.
    tls_key: str = field(default="", repr=False)
    credential_value: str = field(default="", repr=False)
    # What its calls came to, most frequent first (read only where it is shown).
    outcomes: tuple[OutcomeCount, ...] = ()

    @classmethod
    def from_row(cls, row: dict[str, Any], sealer: Sealer) -> ProviderRecord:
        values = {key: value for key, value in row.items() if key not in (*_SEALED.values(), "outcomes")}
        for plain, sealed in _SEALED.items():
            values[plain] = sealer.open(bytes(row[sealed])).decode() if row[sealed] else ""
        outcomes = tuple(
            OutcomeCount(o["outcome"], o["count"], datetime.fromisoformat(o["last_time"]), o["last_detail"])
            for o in row.get("outcomes") or ()
        )
        return cls(**{**values, "trigger": Trigger(row["trigger"]), "outcomes": outcomes})

    def route(self) -> Route:
        """How to reach it: its target, over TLS or not, with its credential header if it has one."""
        tls = TlsSettings(self.tls_ca, self.tls_cert, self.tls_key, self.tls_server_name) if self.tls else None
        credential = (self.credential_header, self.credential_value) if self.credential_header else None
        return Route(self.target, tls, credential)

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
    def __init__(
        self, database: Database, sealer: Sealer, quotas: Callable[[str], Quota] = lambda namespace: DEFAULT_QUOTA
    ) -> None:
        self._database = database
        self._sealer = sealer
        self._quotas = quotas

    def _stored(self, fields: dict[str, Any]) -> dict[str, Any]:
        """The columns for `fields`: secrets sealed, the trigger by its value."""
        stored = {key: value.value if isinstance(value, Trigger) else value for key, value in fields.items()}
        for plain, sealed in _SEALED.items():
            if plain in stored:
                value = stored.pop(plain)
                stored[sealed] = self._sealer.seal(value.encode()) if value else None
        return stored

    def _record(self, row: dict[str, Any]) -> ProviderRecord:
        return ProviderRecord.from_row(row, self._sealer)

    async def register(self, namespace: str, fields: dict[str, Any]) -> ProviderRecord:
        """A new registration, within the namespace's quota of providers (one registration at a time
        per namespace, so two cannot both pass it)."""
        async with self._database.connection(namespace) as conn:
            allowed = self._quotas(namespace).providers
            if allowed is not None:
                await conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"providers of {namespace}",))
                cursor = await conn.execute(
                    f"SELECT count(*) AS n FROM {SCHEMA}.providers WHERE namespace = %s", (namespace,)
                )
                held = int((await cursor.fetchone() or {"n": 0})["n"])
                if held >= allowed:
                    raise over_quota("providers", namespace, held, 1, allowed, "providers")
            stored = {**self._stored(fields), "namespace": namespace}
            columns = ", ".join(stored)
            values = ", ".join(f"%({column})s" for column in stored)
            cursor = await conn.execute(
                f"INSERT INTO {SCHEMA}.providers ({columns}) VALUES ({values})"
                f" ON CONFLICT DO NOTHING RETURNING {_COLUMNS}",
                stored,
            )
            row = await cursor.fetchone()
            if row is None:
                raise AlreadyExists("provider", fields["name"])
            await _announce(conn, namespace)
            return self._record(row)

    async def get(self, namespace: str, name: str) -> ProviderRecord:
        async with self._database.connection(namespace) as conn:
            cursor = await conn.execute(
                f"SELECT {_COLUMNS}, {_OUTCOMES} FROM {SCHEMA}.providers p WHERE namespace = %s AND name = %s",
                (namespace, name),
            )
            row = await cursor.fetchone()
        if row is None:
            raise NotFound("provider", name)
        return self._record(row)

    async def page(self, namespace: str, after: tuple[int, int] | None, limit: int) -> list[ProviderRecord]:
        """By priority (highest first), then registration; `after` is the (priority, seq) a page ended on."""
        priority, seq = after if after else (2**31, 0)
        async with self._database.connection(namespace) as conn:
            cursor = await conn.execute(
                f"SELECT {_COLUMNS}, {_OUTCOMES} FROM {SCHEMA}.providers p WHERE namespace = %s"
                " AND (priority < %s OR (priority = %s AND seq > %s)) ORDER BY priority DESC, seq LIMIT %s",
                (namespace, priority, priority, seq, limit),
            )
            return [self._record(row) for row in await cursor.fetchall()]

    async def in_namespace(self, namespace: str) -> list[ProviderRecord]:
        """The namespace's registrations, by priority (highest first), then registration."""
        async with self._database.connection(namespace) as conn:
            cursor = await conn.execute(
                f"SELECT {_COLUMNS} FROM {SCHEMA}.providers WHERE namespace = %s ORDER BY priority DESC, seq",
                (namespace,),
            )
            return [self._record(row) for row in await cursor.fetchall()]

    async def update(self, namespace: str, name: str, changes: dict[str, Any]) -> ProviderRecord:
        values = self._stored(changes)
        assignments = ", ".join(f"{column} = %({column})s" for column in values)
        async with self._database.connection(namespace) as conn:
            cursor = await conn.execute(
                f"UPDATE {SCHEMA}.providers SET {assignments}{', ' if assignments else ''}update_time = now()"
                f" WHERE namespace = %(namespace)s AND name = %(name)s RETURNING {_COLUMNS}",
                {**values, "namespace": namespace, "name": name},
            )
            row = await cursor.fetchone()
            if row is None:
                raise NotFound("provider", name)
            await _announce(conn, namespace)
            return self._record(row)

    async def delete(self, namespace: str, name: str) -> None:
        async with self._database.connection(namespace) as conn:
            cursor = await conn.execute(
                f"DELETE FROM {SCHEMA}.providers WHERE namespace = %s AND name = %s RETURNING name", (namespace, name)
            )
            if await cursor.fetchone() is None:
                raise NotFound("provider", name)
            await _announce(conn, namespace)


async def _announce(conn: Connection, namespace: str) -> None:
    # Delivered on commit, and only then: a rolled-back change announces nothing.
    await conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, namespace))


class ProviderDirectory:
    """This replica's view of the providers of each namespace it has served, kept current by the
    change listener.

    A namespace's registrations are loaded the first time a call needs them, with a
    connection acting for that namespace, like any other read: the directory never
    reads across namespaces. After that, `Inject` reads the cache and never waits on
    the database for it; a change announced for a cached namespace reloads it.
    """

    def __init__(
        self,
        repository: ProviderRepository,
        listener: ChangeListener,
        on_refresh: Callable[[set[Route]], Awaitable[None]] | None = None,
    ) -> None:
        self._repository = repository
        # Told the routes still registered after each refresh, e.g. to close unused channels.
        self._on_refresh = on_refresh
        self._providers: dict[str, list[ProviderRecord]] = {}
        # Bumped by each announced change, so a load that raced a change is done again.
        self._versions: dict[str, int] = {}
        listener.subscribe(CHANNEL, changed=self._changed, reload=self._reload_cached)

    async def providers(self, namespace: str) -> list[ProviderRecord]:
        """The namespace's providers, by priority (highest first), then registration."""
        cached = self._providers.get(namespace)
        if cached is None:
            await self.refresh(namespace)
            cached = self._providers[namespace]
        return cached

    async def select(self, namespace: str, names: Sequence[str]) -> tuple[list[ProviderRecord], list[str]]:
        """The providers `Inject` asks: the named ones (and the names not registered), or every enabled one."""
        registered = await self.providers(namespace)
        if not names:
            return [record for record in registered if record.enabled], []
        by_name = {record.name: record for record in registered}
        return [by_name[name] for name in names if name in by_name], [name for name in names if name not in by_name]

    def routes(self) -> set[Route]:
        return {record.route() for records in self._providers.values() for record in records}

    async def refresh(self, namespace: str) -> None:
        while True:
            version = self._versions.get(namespace, 0)
            loaded = await self._repository.in_namespace(namespace)
            if self._versions.get(namespace, 0) == version:
                break
        self._providers[namespace] = loaded
        if self._on_refresh is not None:
            await self._on_refresh(self.routes())

    async def _changed(self, namespace: str) -> None:
        self._versions[namespace] = self._versions.get(namespace, 0) + 1
        if namespace in self._providers:
            await self.refresh(namespace)

    async def _reload_cached(self) -> None:
        for namespace in list(self._providers):
            await self._changed(namespace)
