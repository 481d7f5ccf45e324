"""API keys: each maps a caller to a namespace (tenant) and a role.

A key reads `cfk_<id>_<secret>`: the id (8 hex digits) names it in listings and
revocations, the secret is 32 random bytes. Only the key's SHA-256 is stored: a
key has 256 bits of entropy, so a slow password hash would add nothing but
latency to every call. Keys travel as `authorization: Bearer <key>` metadata.

While no key is active the service is open: every call acts as an admin of the
`default` namespace, and start-up says so loudly. Creating the first key closes it,
on every replica, within moments (LISTEN/NOTIFY), as revoking a key takes effect.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row

from ..postgres.listener import ChangeListener
from ..postgres.migrations import SCHEMA

logger = logging.getLogger(__name__)

CHANNEL = "contextfold_keys"
DEFAULT_NAMESPACE = "default"
ROLES = ("agent", "admin")
_PREFIX = "cfk_"


@dataclass(frozen=True)
class Caller:
    namespace: str
    role: str
    # The key's id; empty while the service is open.
    key_id: str = ""


OPEN_CALLER = Caller(DEFAULT_NAMESPACE, "admin")


@dataclass(frozen=True)
class KeyRecord:
    id: str
    namespace: str
    role: str
    description: str
    create_time: datetime
    revoke_time: datetime | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "namespace": self.namespace,
            "role": self.role,
            "description": self.description,
            "create_time": self.create_time.isoformat(),
            "revoked": self.revoke_time.isoformat() if self.revoke_time else None,
        }


def hash_key(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


def new_key() -> tuple[str, str]:
    """A fresh key and its id."""
    key_id = secrets.token_hex(4)
    return f"{_PREFIX}{key_id}_{secrets.token_urlsafe(32)}", key_id


class KeyRepository:
    """Keys in Postgres, for the operator's CLI (which connects as the login role)."""

    def __init__(self, conninfo: str) -> None:
        self._conninfo = conninfo

    async def _connect(self) -> psycopg.AsyncConnection[dict[str, Any]]:
        return await psycopg.AsyncConnection.connect(self._conninfo, autocommit=True, row_factory=dict_row)

    async def create(self, namespace: str, role: str, description: str = "") -> tuple[KeyRecord, str]:
        """A new key for `namespace` with `role`; the key itself is shown only here."""
        if role not in ROLES:
            raise ValueError(f"role must be one of {', '.join(ROLES)}, got {role!r}")
        if not namespace or len(namespace) > 128 or not namespace.isprintable():
            raise ValueError("namespace must be 1 to 128 printable characters")
        key, key_id = new_key()
        async with await self._connect() as conn, conn.transaction():
            cursor = await conn.execute(
                f"INSERT INTO {SCHEMA}.api_keys (id, key_hash, namespace, role, description)"
                " VALUES (%s, %s, %s, %s, %s) RETURNING id, namespace, role, description, create_time, revoke_time",
                (key_id, hash_key(key), namespace, role, description),
            )
            row = await cursor.fetchone()
            await conn.execute("SELECT pg_notify(%s, '')", (CHANNEL,))
        assert row is not None
        return KeyRecord(**row), key

    async def list(self) -> list[KeyRecord]:
        async with await self._connect() as conn:
            cursor = await conn.execute(
                f"SELECT id, namespace, role, description, create_time, revoke_time FROM {SCHEMA}.api_keys"
                " ORDER BY create_time, id"
            )
            return [KeyRecord(**row) for row in await cursor.fetchall()]

    async def revoke(self, key_id: str) -> bool:
        """Revoke a key; False when no active key has that id."""
        async with await self._connect() as conn, conn.transaction():
            cursor = await conn.execute(
                f"UPDATE {SCHEMA}.api_keys SET revoke_time = now() WHERE id = %s AND revoke_time IS NULL RETURNING id",
                (key_id,),
            )
            revoked = await cursor.fetchone() is not None
            await conn.execute("SELECT pg_notify(%s, '')", (CHANNEL,))
        return revoked


class KeyRing:
    """This replica's view of the active keys, kept current by the change listener; a lookup never
    waits on Postgres."""

    def __init__(self, conninfo: str, listener: ChangeListener) -> None:
        self._conninfo = conninfo
        self._callers: dict[bytes, Caller] = {}
        self._loaded = False
        listener.subscribe(CHANNEL, changed=lambda _: self.reload(), reload=self.reload)

    @property
    def open(self) -> bool:
        """Whether no key is active, so that every call acts as an admin of `default`."""
        return not self._callers

    def caller(self, key: str) -> Caller | None:
        """Whose key this is; None for a key that is unknown or revoked."""
        return self._callers.get(hash_key(key))

    async def reload(self) -> None:
        async with await psycopg.AsyncConnection.connect(self._conninfo, autocommit=True, row_factory=dict_row) as conn:
            cursor = await conn.execute(
                f"SELECT id, key_hash, namespace, role FROM {SCHEMA}.api_keys WHERE revoke_time IS NULL"
            )
            rows = await cursor.fetchall()
        first, was_open = not self._loaded, self.open
        self._callers = {bytes(row["key_hash"]): Caller(row["namespace"], row["role"], row["id"]) for row in rows}
        self._loaded = True
        if not first and was_open == self.open:
            return
        if self.open:
            logger.warning(
                "NO API KEYS: the service is OPEN, every caller acts as an admin of the %r namespace."
                " Create a key (contextfold keys create) to require one",
                DEFAULT_NAMESPACE,
            )
        else:
            logger.info("API keys are required | active_keys=<%d>", len(self._callers))
