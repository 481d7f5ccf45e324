"""Quotas per tenant: what one namespace may keep and how fast it may call, as the operator sets them.

Each limit is the operator's for that namespace (`contextfold tenants set-quota`), or the server's
default, generous, for every namespace the operator set nothing for. What is kept (stores,
providers, entries, the bytes entries take, versions of an entry) is checked in the transaction
that would pass it: over a quota, the write is RESOURCE_EXHAUSTED with `QuotaFailure` naming the
limit, and nothing of it is stored (concurrent writes of one tenant may each pass a count the
other has not committed yet: a quota is exceeded by at most what they add at once). Rates (calls,
and writes, per second) are token buckets in each worker, each taking its share of the rate (the
rate over the workers: `--workers` of them), so a tenant's rate holds across every worker of a
replica; replicas each take the whole rate.

The quotas live in the owner's table `tenant_quotas`; every worker keeps them in memory, told of
changes by NOTIFY, as it keeps the API keys.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.rows import dict_row

from ..errors import ResourceExhausted
from ..postgres.listener import ChangeListener
from ..postgres.schema import NAMESPACE_SETTING, SCHEMA

CHANNEL = "contextfold_quotas"
LIMITS = (
    "stores",
    "providers",
    "entries",
    "stored_bytes",
    "versions_per_entry",
    "requests_per_second",
    "writes_per_second",
)


@dataclass(frozen=True)
class Quota:
    """One namespace's limits; None: none (a rate), or the server's default once merged."""

    stores: int | None = None
    providers: int | None = None
    entries: int | None = None
    stored_bytes: int | None = None
    versions_per_entry: int | None = None
    requests_per_second: float | None = None
    writes_per_second: float | None = None

    def over(self, defaults: Quota) -> Quota:
        """These limits, and the defaults' where these set none."""
        return Quota(
            **{
                name: value if (value := getattr(self, name)) is not None else getattr(defaults, name)
                for name in LIMITS
            }
        )

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# The server's defaults: generous, so an operator who sets nothing is limited by nothing a tenant
# would reach by accident; the rates unlimited.
DEFAULT_QUOTA = Quota(
    stores=1_000,
    providers=100,
    entries=10_000_000,
    stored_bytes=100 * 1024**3,
    versions_per_entry=100,
)


def over_quota(limit: str, namespace: str, used: int, adding: int | None, allowed: int, what: str) -> ResourceExhausted:
    """The refusal of a write past the namespace's quota of `what`: it holds `used`, and the write would add
    `adding` (None: what it holds counts the write already)."""
    would = "" if adding is None else f", and this call would add {adding:,}"
    return ResourceExhausted(
        f"QUOTA_{limit.upper()}",
        f"this namespace's quota of {what} is {allowed:,}: it holds {used:,}{would}",
        subject=f"namespace:{namespace}/{limit}",
    )


class QuotaBook:
    """This worker's view of every namespace's quota, kept current by the change listener."""

    def __init__(self, conninfo: str, listener: ChangeListener, defaults: Quota = DEFAULT_QUOTA, workers: int = 1):
        self._conninfo = conninfo
        self._defaults = defaults
        self._workers = max(1, workers)
        # Each namespace's quota as the operator set it, merged with the defaults once, as it is read.
        self._set: dict[str, Quota] = {}
        self._buckets: dict[tuple[str, str], _Bucket] = {}
        listener.subscribe(CHANNEL, changed=lambda _: self.reload(), reload=self.reload)

    def quota(self, namespace: str) -> Quota:
        return self._set.get(namespace, self._defaults)

    async def reload(self) -> None:
        async with await psycopg.AsyncConnection.connect(self._conninfo, autocommit=True, row_factory=dict_row) as conn:
            cursor = await conn.execute(f"SELECT namespace, {', '.join(LIMITS)} FROM {SCHEMA}.tenant_quotas")
            rows = await cursor.fetchall()
        self._set = {row.pop("namespace"): Quota(**row).over(self._defaults) for row in rows}
        self._buckets = {}

    def take(self, namespace: str, writes: bool) -> None:
        """Spend a call of `namespace` (and a write, when it `writes`) from its rates: RESOURCE_EXHAUSTED,
        with when a retry may pass, when it has none left."""
        quota = self.quota(namespace)
        for limit, rate in (
            ("requests_per_second", quota.requests_per_second),
            ("writes_per_second", quota.writes_per_second if writes else None),
        ):
            if rate is None:
                continue
            bucket = self._buckets.setdefault((namespace, limit), _Bucket(rate / self._workers))
            wait = bucket.take()
            if wait:
                raise ResourceExhausted(
                    f"QUOTA_{limit.upper()}",
                    f"this namespace's quota is {rate:g} {limit.replace('_', ' ')}: retry after {wait * 1000:.0f} ms",
                    subject=f"namespace:{namespace}/{limit}",
                    retry_after=wait,
                )


class _Bucket:
    """A token bucket: `rate` tokens a second, holding at most a second's worth (a burst of `rate`)."""

    def __init__(self, rate: float) -> None:
        self._rate = rate
        self._tokens = max(1.0, rate)
        self._at = time.monotonic()

    def take(self) -> float:
        """0 when a token was taken; else the seconds until one will be there."""
        now = time.monotonic()
        self._tokens = min(max(1.0, self._rate), self._tokens + (now - self._at) * self._rate)
        self._at = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return 0.0
        return (1.0 - self._tokens) / self._rate


class QuotaRepository:
    """Quotas, usage and activity in Postgres, for the operator's CLI (which connects as the owner)."""

    def __init__(self, conninfo: str) -> None:
        self._conninfo = conninfo

    async def _connect(self) -> psycopg.AsyncConnection[dict[str, Any]]:
        return await psycopg.AsyncConnection.connect(self._conninfo, autocommit=True, row_factory=dict_row)

    async def set(self, namespace: str, limits: dict[str, float | int | None]) -> Quota:
        """Set the limits given (None: back to the server's default) and keep the others."""
        unknown = set(limits) - set(LIMITS)
        if unknown:
            raise ValueError(f"unknown limits: {', '.join(sorted(unknown))}")
        async with await self._connect() as conn, conn.transaction():
            columns = list(limits)
            assignments = ", ".join(f"{name} = excluded.{name}" for name in columns) or "namespace = excluded.namespace"
            cursor = await conn.execute(
                f"INSERT INTO {SCHEMA}.tenant_quotas (namespace{''.join(', ' + c for c in columns)})"
                f" VALUES (%s{', %s' * len(columns)}) ON CONFLICT (namespace) DO UPDATE SET {assignments},"
                f" update_time = now() RETURNING {', '.join(LIMITS)}",
                (namespace, *limits.values()),
            )
            row = await cursor.fetchone()
            await conn.execute("SELECT pg_notify(%s, '')", (CHANNEL,))
        assert row is not None
        return Quota(**row)

    async def show(self, namespace: str, defaults: Quota = DEFAULT_QUOTA) -> dict[str, Any]:
        """The namespace's quota (the defaults where it sets none), what it holds, and what it did."""
        async with await self._connect() as conn:
            # Stores and providers are counted as the namespace sees them (row-level security).
            await conn.execute("SELECT set_config(%s, %s, false)", (NAMESPACE_SETTING, namespace))
            cursor = await conn.execute(
                f"SELECT {', '.join(LIMITS)} FROM {SCHEMA}.tenant_quotas WHERE namespace = %s", (namespace,)
            )
            row = await cursor.fetchone()
            cursor = await conn.execute(
                f"SELECT (SELECT count(*) FROM {SCHEMA}.stores s WHERE s.namespace = %(n)s) AS stores,"
                f" (SELECT count(*) FROM {SCHEMA}.providers p WHERE p.namespace = %(n)s) AS providers,"
                f" coalesce((SELECT sum(u.entries) FROM {SCHEMA}.tenant_usage u WHERE u.namespace = %(n)s), 0)"
                " AS entries,"
                f" coalesce((SELECT sum(u.bytes) FROM {SCHEMA}.tenant_usage u WHERE u.namespace = %(n)s), 0)"
                " AS stored_bytes",
                {"n": namespace},
            )
            usage = await cursor.fetchone()
            cursor = await conn.execute(
                f"SELECT kind, count FROM {SCHEMA}.tenant_activity WHERE namespace = %s ORDER BY kind", (namespace,)
            )
            activity = {row["kind"]: int(row["count"]) for row in await cursor.fetchall()}
        quota = (Quota(**row) if row else Quota()).over(defaults)
        return {
            "namespace": namespace,
            "quota": quota.as_dict(),
            "usage": {k: int(v) for k, v in (usage or {}).items()},
            # Calls by method, texts embedded, tokens injected: as the workers have added them so far.
            "activity": activity,
        }
