"""The memory lifecycle in Postgres: updates and their versions, erasure, export and import, expiry,
and the turns Remember has noted. CRUD and search are `store.py`'s; the statements `statements.py`'s.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from datetime import datetime
from typing import Any

import numpy as np
from psycopg.types.json import Jsonb

from ..access.quotas import DEFAULT_QUOTA
from ..engine.filters import Filter
from ..errors import Aborted, AlreadyExists, FailedPrecondition, InvalidArgument, NotFound
from ..postgres.pool import Connection
from ..postgres.schema import PURGE_SETTING, SCHEMA
from .records import UNSCOPED, ImportedMemory, MemoryChange, MemoryRecord, MemoryVersion, NewMemory, Scope, StoreRecord
from .statements import (
    MEMORY_COLUMNS,
    SENTENCES_PENDING,
    VERSIONED_COLUMNS,
    entries_where,
    entry_params,
    insert_entries,
)
from .store import (
    PostgresMemoryStore,
    add_memories_on,
    check_dimension,
    check_usage,
    delete_expired,
    store_settings,
)

# An import's entry replaces the one under its id when anything differs: a second import changes nothing.
_REPLACE_CHANGED = (
    "DO UPDATE SET store = excluded.store, content = excluded.content, metadata = excluded.metadata,"
    " user_id = excluded.user_id, agent_id = excluded.agent_id, session_id = excluded.session_id,"
    " dimension = excluded.dimension, embedding = excluded.embedding, create_time = excluded.create_time,"
    " update_time = excluded.update_time, expire_time = excluded.expire_time, version = m.version + 1"
    " WHERE (m.store, m.content, m.metadata, m.user_id, m.agent_id, m.session_id, m.embedding, m.create_time,"
    " m.update_time, m.expire_time) IS DISTINCT FROM (excluded.store, excluded.content, excluded.metadata,"
    " excluded.user_id, excluded.agent_id, excluded.session_id, excluded.embedding, excluded.create_time,"
    " excluded.update_time, excluded.expire_time)"
)


class MemoryLifecycle:
    def __init__(self, store: PostgresMemoryStore) -> None:
        self._store = store

    def _versions_kept(self, namespace: str) -> int:
        """An entry's history: its newest versions, this many (the namespace's quota); an older one goes
        as a new one comes."""
        return self._store.quota(namespace).versions_per_entry or DEFAULT_QUOTA.versions_per_entry or 1

    async def update_memory(
        self,
        namespace: str,
        memory_id: str,
        change: MemoryChange,
        *,
        etag: str = "",
        store: str = "",
        allow_missing: bool = False,
        scope: Scope = UNSCOPED,
        replaced_by: str = "",
    ) -> tuple[MemoryRecord, bool]:
        """The entry after `change`, and whether it was added: with `allow_missing`, an id no live entry
        holds within `scope` is added to `store` (from the change's fields). Otherwise the version it
        replaces is kept, with `replaced_by` and the time. `etag`, when given, must be the entry's: ABORTED
        when another update came first. The entry's row is locked for the update, so two updates of one
        version cannot both pass the check."""
        where, params = entries_where(scope, None)
        live_at = self._store.now()
        async with self._store.connection(namespace) as conn:
            cursor = await conn.execute(
                f"SELECT {MEMORY_COLUMNS}, m.dimension FROM {SCHEMA}.memories m"
                f" WHERE m.namespace = %(namespace)s AND m.id = %(id)s{where} FOR UPDATE",
                {"namespace": namespace, "id": memory_id, "live_at": live_at, **params},
            )
            row = await cursor.fetchone()
            if row is None:
                if not allow_missing:
                    raise NotFound("memory", memory_id)
                if etag:
                    raise Aborted("ETAG_MISMATCH", f"memory {memory_id!r} does not exist: no etag matches it")
                return await self._add_for_update(conn, namespace, memory_id, change, store, live_at), True
            current = self._store.record(row)
            if etag and etag != current.etag:
                raise Aborted(
                    "ETAG_MISMATCH", f"memory {memory_id!r} changed since it was read: read it again and retry"
                )
            if store and store != current.store:
                raise InvalidArgument.of("memory.store", f"memory {memory_id!r} is in store {current.store!r}")
            if "vector" in change.fields:
                check_dimension(change.vector, row["dimension"], current.store, "memory.vector")
            # Stamped when the change happens (the row is locked by now), not when the transaction began:
            # of two updates, the one that waits for the other's lock is the later one, and says so.
            cursor = await conn.execute(
                f"INSERT INTO {SCHEMA}.memory_versions"
                f" (namespace, id, version, {VERSIONED_COLUMNS}, replaced_by, replace_time)"
                f" SELECT namespace, id, version, {VERSIONED_COLUMNS}, %s, clock_timestamp() FROM {SCHEMA}.memories"
                " WHERE namespace = %s AND id = %s RETURNING replace_time",
                (replaced_by, namespace, memory_id),
            )
            stamped = await cursor.fetchone()
            assert stamped is not None  # locked above
            await conn.execute(
                f"DELETE FROM {SCHEMA}.memory_versions WHERE namespace = %s AND id = %s AND version <= %s",
                (namespace, memory_id, current.version - self._versions_kept(namespace)),
            )
            assignments = ["version = version + 1", "update_time = %(changed)s"]
            values: dict[str, Any] = {"namespace": namespace, "id": memory_id, "changed": stamped["replace_time"]}
            for name in sorted(change.fields):
                if name in ("user_id", "agent_id", "session_id"):
                    values[name] = getattr(change.scope, name)
                elif name == "metadata":
                    values[name] = Jsonb(change.metadata)
                elif name == "vector":
                    values[name] = np.asarray(change.vector, dtype=np.float32)
                else:
                    values[name] = getattr(change, name)
                # A vector goes in binary, as pgvector reads it: as text, it is a float formatted at a time.
                column, form = ("embedding", "b") if name == "vector" else (name, "s")
                assignments.append(f"{column} = %({name}){form}")
            if "vector" in change.fields:
                # Whose the new vector is: its sentences are embedded after when it is the server's model's.
                values["sentences_state"] = SENTENCES_PENDING if change.embedded else None
                assignments.append("sentences_state = %(sentences_state)s")
            cursor = await conn.execute(
                f"UPDATE {SCHEMA}.memories SET {', '.join(assignments)}"
                f" WHERE namespace = %(namespace)s AND id = %(id)s RETURNING {MEMORY_COLUMNS}",
                values,
            )
            updated = await cursor.fetchone()
            assert updated is not None  # locked above
            await check_usage(conn, namespace, self._store.quota(namespace), 0)
            return self._store.record(updated), False

    async def _add_for_update(
        self, conn: Connection, namespace: str, memory_id: str, change: MemoryChange, store: str, live_at: datetime
    ) -> MemoryRecord:
        """An upsert's add: the entry from the change's fields, in `store`. An expired entry still holding
        the id (not purged yet) goes first; one outside the caller's scope keeps it (ALREADY_EXISTS)."""
        dimension, ttl = await store_settings(conn, namespace, store, lock="FOR SHARE")
        check_dimension(change.vector, dimension, store, "memory.vector")
        await delete_expired(conn, namespace, [memory_id], live_at)
        new = NewMemory(
            change.content, change.vector, memory_id, change.metadata, change.scope, change.expire_time, change.embedded
        )
        cursor = await conn.execute(
            insert_entries("DO NOTHING", MEMORY_COLUMNS), entry_params(namespace, [(memory_id, store, new)], ttl)
        )
        row = await cursor.fetchone()
        if row is None:
            raise AlreadyExists("memory", memory_id, f"memory.id: {memory_id!r} is taken")
        held = await check_usage(conn, namespace, self._store.quota(namespace), 1)
        self._store.grew(namespace, dimension, held)
        return self._store.record(row)

    async def list_versions(
        self, namespace: str, memory_id: str, scope: Scope, before: int, limit: int
    ) -> list[MemoryVersion]:
        """The versions of a live entry within `scope` that updates replaced, newest first, older than
        `before` (0: from the newest). NOT_FOUND when the entry is not there. Each version is within
        `scope` too: what the entry was while it was another user's is not this caller's to read."""
        current = await self._store.get_memory(namespace, memory_id, scope)
        where, params = entries_where(scope, None, live=False)
        rows = await self._store.read(
            namespace,
            f"SELECT id, version, {VERSIONED_COLUMNS}, replace_time, replaced_by FROM {SCHEMA}.memory_versions m"
            " WHERE m.namespace = %(namespace)s AND m.id = %(id)s AND (%(before)s = 0 OR m.version < %(before)s)"
            f"{where} ORDER BY m.version DESC LIMIT %(limit)s",
            {"namespace": namespace, "id": memory_id, "before": before, "limit": limit, **params},
        )
        return [
            MemoryVersion(
                row["version"], self._store.record({**row, "seq": current.seq}), row["replace_time"], row["replaced_by"]
            )
            for row in rows
        ]

    async def erase(
        self, namespace: str, stores: Sequence[str], scope: Scope, tree: Filter | None, batch: int = 1000
    ) -> int:
        """Delete every entry of `stores` (every store when empty) within `scope` matching `tree`, expired
        ones too, with their versions; with a scope and no filter, the turns Remember noted for it too.
        In batches of `batch`, each its own transaction: a long erasure holds no lock for long, and one
        cut short is finished by calling again. Named stores must exist."""
        erasable, params = await self._erasable(namespace, stores, scope, tree)
        params["batch"] = batch
        statement = (
            f"DELETE FROM {SCHEMA}.memories WHERE namespace = %(namespace)s AND id IN ("
            f" SELECT m.id FROM {SCHEMA}.memories m WHERE {erasable} LIMIT %(batch)s) RETURNING 1"
        )
        erased = 0
        while True:
            async with self._store.connection(namespace) as conn:
                cursor = await conn.execute(statement, params)
                # Counted from the rows returned: in pipeline mode, a cursor's rowcount is not known yet.
                deleted = len(await cursor.fetchall())
            erased += deleted
            if deleted < batch:
                break
        if tree is None and scope.fields():
            # Without a filter, the conditions are the scope's alone: the ledger's rows have its columns too.
            async with self._store.connection(namespace) as conn:
                await conn.execute(f"DELETE FROM {SCHEMA}.remembered_turns m WHERE {erasable}", params)
        return erased

    async def count(self, namespace: str, stores: Sequence[str], scope: Scope, tree: Filter | None) -> int:
        """How many entries `erase` would delete now (read on the primary, as the erasure would be)."""
        erasable, params = await self._erasable(namespace, stores, scope, tree)
        async with self._store.connection(namespace) as conn:
            cursor = await conn.execute(
                f"SELECT count(*) AS erasable FROM {SCHEMA}.memories m WHERE {erasable}", params
            )
            row = await cursor.fetchone()
        return int(row["erasable"]) if row else 0

    async def _erasable(
        self, namespace: str, stores: Sequence[str], scope: Scope, tree: Filter | None
    ) -> tuple[str, dict[str, Any]]:
        """The conditions on `m` (an entry, or a row of Remember's ledger: both have its columns) that an
        erasure's rows meet, and their parameters; named stores must exist."""
        if stores:
            found = await self._store.get_stores(namespace, stores)
            missing = [name for name in stores if name not in found]
            if missing:
                raise NotFound("store", missing[0])
        where, params = entries_where(scope, tree, live=False)
        params |= {"namespace": namespace, "stores": list(stores)}
        conditions = (
            "m.namespace = %(namespace)s"
            f" AND (cardinality(%(stores)s::text[]) = 0 OR m.store = ANY(%(stores)s::text[])){where}"
        )
        return conditions, params

    async def export(
        self, namespace: str, stores: Sequence[str], scope: Scope, tree: Filter | None, batch: int = 256
    ) -> AsyncIterator[list[tuple[MemoryRecord, list[float]]]]:
        """The live entries of `stores` within `scope` matching `tree`, with their vectors, oldest first,
        `batch` at a time: each batch one read after the last one's position, so an export holds no
        transaction open while its reader is slow."""
        where, params = entries_where(scope, tree)
        params |= {"namespace": namespace, "stores": list(stores), "batch": batch}
        after = 0
        while True:
            rows = await self._store.read(
                namespace,
                f"SELECT {MEMORY_COLUMNS}, m.embedding FROM {SCHEMA}.memories m WHERE m.namespace = %(namespace)s"
                f" AND m.store = ANY(%(stores)s::text[]) AND m.seq > %(after)s{where}"
                " ORDER BY m.seq LIMIT %(batch)s",
                {**params, "after": after, "live_at": self._store.now()},
            )
            if not rows:
                return
            # pgvector's psycopg adapter reads the column as its `Vector`.
            yield [(self._store.record(row), row["embedding"].to_list()) for row in rows]
            if len(rows) < batch:
                return
            after = rows[-1]["seq"]

    async def import_batch(
        self, namespace: str, stores: Sequence[StoreRecord], memories: Sequence[ImportedMemory]
    ) -> tuple[list[str], dict[str, int]]:
        """Create the stores that do not exist (one that does must have the same dimension), and add the
        entries, replacing one whose id exists with something else: all or nothing. An update time equal
        to the creation time is an entry never updated (as exports show it). The stores created
        and how many entries were added, replaced and left unchanged."""
        created: list[str] = []
        async with self._store.connection(namespace) as conn:
            for index, record in enumerate(stores):
                made = await self._store.create_store_on(
                    conn, namespace, record.name, record.description, record.dimension, record.default_ttl
                )
                if made is not None:
                    created.append(record.name)
                    continue
                dimension, _ = await store_settings(conn, namespace, record.name)
                if dimension != record.dimension:
                    raise FailedPrecondition(
                        f"stores[{index}]: store {record.name!r} exists with {dimension} dimensions, not"
                        f" {record.dimension}"
                    )
            settings = {}
            for index, imported in enumerate(memories):
                if imported.store not in settings:
                    settings[imported.store] = await store_settings(conn, namespace, imported.store, "FOR SHARE")
                check_dimension(
                    imported.memory.vector, settings[imported.store][0], imported.store, f"memories[{index}].vector"
                )
            counts = {"added": 0, "replaced": 0}
            if memories:
                cursor = await conn.execute(
                    insert_entries(_REPLACE_CHANGED, "(xmax = 0) AS added", keep_times=True),
                    entry_params(
                        namespace,
                        [(m.memory.id, m.store, m.memory) for m in memories],
                        times=[(m.create_time, m.update_time) for m in memories],
                        imported=True,
                    ),
                )
                for row in await cursor.fetchall():
                    counts["added" if row["added"] else "replaced"] += 1
                held = await check_usage(conn, namespace, self._store.quota(namespace), counts["added"])
                for dimension in {dimension for dimension, _ in settings.values()}:
                    self._store.grew(namespace, dimension, held)
            counts["unchanged"] = len(memories) - counts["added"] - counts["replaced"]
        return created, counts

    async def purge_expired(self, batch: int) -> int:
        """Delete up to `batch` entries that expired, in any namespace (the purge's own policy lets this
        connection see them, and nothing else): how many were deleted."""
        async with self._store.connection("") as conn:
            await conn.execute("SELECT set_config(%s, 'on', true)", (PURGE_SETTING,))
            cursor = await conn.execute(
                f"DELETE FROM {SCHEMA}.memories WHERE (namespace, id) IN (SELECT namespace, id"
                f" FROM {SCHEMA}.memories WHERE expire_time <= now() LIMIT %s) RETURNING 1",
                (batch,),
            )
            return len(await cursor.fetchall())

    # Remember's turns

    async def remember_turns(
        self, namespace: str, store: str, scope: Scope, turns: Sequence[str], memories: Sequence[NewMemory]
    ) -> list[MemoryRecord]:
        """Note the turns (their hashes) as remembered and add `memories`, in one transaction, so neither
        stands without the other; ABORTED when another call noted one of them first (its memories are that
        call's). The entries added."""
        async with self._store.connection(namespace) as conn:
            await store_settings(conn, namespace, store, lock="FOR SHARE")
            cursor = await conn.execute(
                f"INSERT INTO {SCHEMA}.remembered_turns (namespace, store, turn, user_id, agent_id, session_id)"
                " SELECT %s, %s, turn, %s, %s, %s FROM unnest(%s::text[]) AS t(turn)"
                " ON CONFLICT DO NOTHING RETURNING turn",
                (namespace, store, scope.user_id, scope.agent_id, scope.session_id, list(turns)),
            )
            if len(await cursor.fetchall()) != len(turns):
                raise Aborted("CONCURRENT_REMEMBER", "another call is remembering these turns: retry to skip them")
            return await add_memories_on(conn, namespace, store, memories, self._store) if memories else []

    async def remembered(self, namespace: str, store: str, turns: Sequence[str]) -> set[str]:
        """Which of `turns` (hashes) Remember has noted in `store`."""
        rows = await self._store.read(
            namespace,
            f"SELECT turn FROM {SCHEMA}.remembered_turns WHERE namespace = %s AND store = %s AND turn = ANY(%s)",
            (namespace, store, list(turns)),
        )
        return {row["turn"] for row in rows}
