"""API keys: each maps a caller to a namespace (tenant) and a role.

A key reads `cfk_<id>_<secret>`: the id (8 hex digits) names it in listings and
revocations, the secret is 32 random bytes. Only the key's SHA-256 is stored: a
key has 256 bits of entropy, so a slow password hash would add nothing but
latency to every call. Keys travel as `authorization: Bearer <key>` metadata.

Keys are required unless the operator runs the service open (`--auth none`): then
every call acts as an admin of `OPEN_NAMESPACE`, a namespace no key can name, so an
open service never reaches a tenant's data. Whether keys exist changes nothing: with
none active (all revoked, say), every call is refused. A key created or revoked takes
effect on every replica within moments (LISTEN/NOTIFY).
"""

from __future__ import annotations

import hashlib
import logging
import re
import secrets
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row

from ..postgres.listener import ChangeListener
from ..postgres.schema import OPEN_NAMESPACE, SCHEMA

logger = logging.getLogger(__name__)

CHANNEL = "contextfold_keys"
ROLES = ("agent", "admin")
_PREFIX = "cfk_"
_RECORD_COLUMNS = "id, namespace, role, description, create_time, revoke_time, user_id, agent_id"
# A key's namespace: a letter or digit, then letters, digits and `._:@/+-`.
_NAMESPACE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@/+-]{0,127}")


@dataclass(frozen=True)
class Caller:
    namespace: str
    role: str
    # The key's id; empty while the service is open.
    key_id: str = ""
    # The scope the key is bound to, if it is: every call made with it is confined to it.
    user_id: str = ""
    agent_id: str = ""


OPEN_CALLER = Caller(OPEN_NAMESPACE, "admin")


@dataclass(frozen=True)
class KeyRecord:
    id: str
    namespace: str
    role: str
    description: str
    create_time: datetime
    revoke_time: datetime | None
    user_id: str = ""
    agent_id: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "namespace": self.namespace,
            "role": self.role,
            "user_id": self.user_id,
            "agent_id": self.agent_id,
            "description": self.description,
            "create_time": self.create_time.isoformat(),
            "revoked": self.revoke_time.isoformat() if self.revoke_time else None,
        }


def bearer_key(authorization: str) -> str:
    """The key an `authorization` value carries (`Bearer <key>`, any case); empty for any other."""
    scheme, _, key = authorization.partition(" ")
    return key.strip() if scheme.lower() == "bearer" else ""


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

    async def create(
        self, namespace: str, role: str, description: str = "", user_id: str = "", agent_id: str = ""
    ) -> tuple[KeyRecord, str]:
        """A new key for `namespace` with `role`, bound to a user and/or an agent if they are given;
        the key itself is shown only here."""
        for name, value in (("user_id", user_id), ("agent_id", agent_id)):
            if len(value) > 128 or not value.isprintable():
                raise ValueError(f"{name} must be at most 128 printable characters")
        if role not in ROLES:
            raise ValueError(f"role must be one of {', '.join(ROLES)}, got {role!r}")
        if not _NAMESPACE.fullmatch(namespace):
            raise ValueError(
                "namespace must be 1 to 128 letters, digits or ._:@/+- characters, starting with a letter or digit"
            )
        key, key_id = new_key()
        async with await self._connect() as conn, conn.transaction():
            cursor = await conn.execute(
                f"INSERT INTO {SCHEMA}.api_keys (id, key_hash, namespace, role, description, user_id, agent_id)"
                f" VALUES (%s, %s, %s, %s, %s, %s, %s) RETURNING {_RECORD_COLUMNS}",
                (key_id, hash_key(key), namespace, role, description, user_id, agent_id),
            )
            row = await cursor.fetchone()
            await conn.execute("SELECT pg_notify(%s, '')", (CHANNEL,))
        assert row is not None
        return KeyRecord(**row), key

    async def list(self) -> list[KeyRecord]:
        async with await self._connect() as conn:
            cursor = await conn.execute(f"SELECT {_RECORD_COLUMNS} FROM {SCHEMA}.api_keys ORDER BY create_time, id")
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

    def __init__(self, conninfo: str, listener: ChangeListener, required: bool = True) -> None:
        self._conninfo = conninfo
        # Whether calls need a key (they do unless the service runs open, `--auth none`).
        self.required = required
        self._callers: dict[bytes, Caller] = {}
        self._loaded = False
        listener.subscribe(CHANNEL, changed=lambda _: self.reload(), reload=self.reload)

    def caller(self, key: str) -> Caller | None:
        """Whose key this is; None for a key that is unknown or revoked."""
        return self._callers.get(hash_key(key))

    async def reload(self) -> None:
        async with await psycopg.AsyncConnection.connect(self._conninfo, autocommit=True, row_factory=dict_row) as conn:
            cursor = await conn.execute(
                f"SELECT id, key_hash, namespace, role, user_id, agent_id FROM {SCHEMA}.api_keys"
                " WHERE revoke_time IS NULL"
            )
            rows = await cursor.fetchall()
        had_keys = bool(self._callers) or not self._loaded
        self._callers = {
            bytes(row["key_hash"]): Caller(row["namespace"], row["role"], row["id"], row["user_id"], row["agent_id"])
            for row in rows
        }
        self._loaded = True
        if self.required and had_keys and not self._callers:
            logger.warning(
                "no active API keys: every call is refused (UNAUTHENTICATED) until one is created"
                " (contextfold keys create)"
            )
