"""The planner's statistics of the entries' table, refreshed soon after the writes that make them stale.

Postgres plans each search for its values from the table's statistics, which autovacuum refreshes
(`ANALYZE`) once enough rows changed since the last time: 50 and a tenth of the table, by default.
It looks at most once a minute (`autovacuum_naptime`), so a store written a moment ago is searched
under plans made for a table Postgres believes empty or a tenth of its size: the first minute of
every new deployment, and of every store filled in bulk into a small table. Measured on LoCoMo's
development conversations (in the process, 190 questions, the table without statistics and with them
in turn, twice): the default ranking added 4.47 and 6.07 ms at p50 over similarity without, 3.63 and
3.72 ms with; the words' matches were found through the scope's index rather than the words'.

So a bulk worker whose write added entries checks the table a second later (the write has committed,
and writes arriving together are checked once), on a connection of the login role's own, and
analyzes it where autovacuum would: the same threshold, without waiting for its turn. The rows changed
are the entries' count against the count the statistics hold (the namespaces' usage rows count them
at once; Postgres' own count of rows changed reaches its statistics views up to ten seconds late), or
Postgres' count where it is larger (updates change rows, not their number). Checks are a sum over the
usage rows and a catalog read each, at most one a second while writes go on. `ANALYZE` reads a sample
of the table (30,000 rows at most), takes no lock that writes or reads wait on, runs one at a time across
every worker and replica (an advisory lock: one that finds it held leaves the table to that one), and
waits at most half a second for an index build or a vacuum holding the table, rather than in line.
A login role that does not own the table (nor is a member of its owner) leaves it to autovacuum: it
would be refused.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import psycopg

from .priority import own_session
from .schema import SCHEMA

logger = logging.getLogger(__name__)

# Autovacuum's own threshold (`autovacuum_analyze_threshold`, `autovacuum_analyze_scale_factor`): the table is
# analyzed once this many rows, and this share of those it held, changed since its last analysis.
CHANGED_ROWS = 50
CHANGED_SHARE = 0.1
# A write tells of its rows before it commits: the table is checked this much later, and while writes go on,
# no more often than this.
CHECK_AFTER_SECONDS = 1.0
# One analysis at a time across every worker and replica.
_ANALYZE_LOCK = 0x616E6C7A  # "anlz"
# How long an analysis waits for the table (a vector index build or a vacuum holds it): less than Postgres'
# `deadlock_timeout` (1 s), past which a vacuum waited on would be cancelled. The next write's check tries again.
LOCK_WAIT = "500ms"
# The entries every namespace holds, from their usage rows: one table read, joined with nothing.
_ENTRIES = f"SELECT coalesce(sum(entries), 0) FROM {SCHEMA}.tenant_usage"
_STALE = (
    "SELECT greatest(abs(%s - greatest(c.reltuples, 0)), coalesce(s.n_mod_since_analyze, 0))"
    " >= %s + %s * greatest(c.reltuples, 0)"
    " FROM pg_class c LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid"
    " WHERE c.oid = %s::regclass AND pg_has_role(c.relowner, 'MEMBER')"
)


class TableStatistics:
    def __init__(
        self, conninfo: str, prepare: Callable[[psycopg.AsyncConnection], Awaitable[None]] | None = None
    ) -> None:
        self._conninfo = conninfo
        # What makes the session ready before it checks (a bulk worker lowers its priority).
        self._prepare = prepare
        self._checking: asyncio.Task[None] | None = None
        # Whether a write came while a check was under way: the table is checked again after it.
        self._again = False

    def wrote(self) -> None:
        """A write added entries: the table's statistics are checked once it has committed, and refreshed
        if they are as stale as autovacuum would refresh them."""
        self._again = True
        if self._checking is None or self._checking.done():
            self._checking = asyncio.get_running_loop().create_task(self._check())

    async def close(self) -> None:
        if self._checking is not None:
            self._checking.cancel()
            await asyncio.gather(self._checking, return_exceptions=True)

    async def _check(self) -> None:
        """Check, and analyze where stale, until no write came during the last check."""
        try:
            while self._again:
                async with await self._connect() as conn:
                    while self._again:
                        self._again = False
                        await asyncio.sleep(CHECK_AFTER_SECONDS)
                        if await _stale(conn):
                            await _analyze(conn)
        except (psycopg.Error, OSError) as error:
            # Autovacuum still refreshes them at its turn; the next write checks again.
            logger.warning("reason=<%s> | the entries' statistics were not checked", error)

    async def _connect(self) -> psycopg.AsyncConnection:
        conn = await own_session(self._conninfo, self._prepare)
        await conn.execute(f"SET lock_timeout = '{LOCK_WAIT}'")
        return conn


async def _stale(conn: psycopg.AsyncConnection) -> bool:
    """Whether autovacuum would analyze the entries' table now (enough rows changed since its last analysis),
    and this session's role may (it owns the table, or is a member of its owner)."""
    cursor = await conn.execute(_ENTRIES)
    entries = int((await cursor.fetchone() or (0,))[0])
    cursor = await conn.execute(_STALE, (entries, CHANGED_ROWS, CHANGED_SHARE, f"{SCHEMA}.memories"))
    row = await cursor.fetchone()
    return bool(row and row[0])


async def _analyze(conn: psycopg.AsyncConnection) -> None:
    """Analyze the entries' table, unless another worker or replica is doing so, or something holds the table
    longer than `LOCK_WAIT` (it never waits in line)."""
    cursor = await conn.execute("SELECT pg_try_advisory_lock(%s)", (_ANALYZE_LOCK,))
    if not (await cursor.fetchone() or (False,))[0]:
        return
    try:
        await conn.execute(f"ANALYZE {SCHEMA}.memories")
        logger.debug("the entries' statistics were refreshed")
    except psycopg.errors.LockNotAvailable:
        logger.debug("the entries' table is held (an index build, a vacuum): analyzed at the next write's check")
    finally:
        await conn.execute("SELECT pg_advisory_unlock(%s)", (_ANALYZE_LOCK,))
