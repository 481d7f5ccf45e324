"""The connection pool every Postgres adapter shares; database failures become UNAVAILABLE.

Every connection is handed out for one namespace, in one transaction that names
it (`contextfold.namespace`, set for that transaction only), which row-level
security checks on every row read or written. Queries name the namespace too;
the policies are the second line, holding even where a query forgot. When the login role would bypass the policies
(a superuser, as with the embedded Postgres), connections act as the
unprivileged service role.

A database that stops answering (a lost connection whose database a fresh one cannot reach), or a
primary that turned read-only (demoted: a write refused with `read_only_sql_transaction`), is tried
with a fresh connection every `RECONNECT_SECONDS`; meanwhile its calls fail at once (UNAVAILABLE),
and once one reaches a database that serves (for the primary, the host of its URL that takes writes
now: `target_session_attrs=read-write`), the pool starts over with new connections there.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import itertools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from types import TracebackType
from typing import Any, cast

import psycopg
from pgvector.psycopg import register_vector_async
from psycopg import sql
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from ..errors import DeadlineReached, ServiceError, StatementTimeout, Unavailable
from .conninfo import described
from .consistency import CALL_POSITION, POSITION_NOW, lsn_value
from .roles import bypasses_row_security
from .schema import NAMESPACE_SETTING, SERVICE_ROLE

logger = logging.getLogger(__name__)

# A pooled connection as adapters use it: rows come back as dicts.
Connection = psycopg.AsyncConnection[dict[str, Any]]
Query = str | sql.SQL | sql.Composed
Params = Sequence[Any] | Mapping[str, Any]


@dataclass(frozen=True)
class Read:
    """One statement of a read (`Database.read_all`): its text, its parameters, and the settings it
    runs with, which last the rest of its transaction."""

    query: Query
    params: Params
    settings: Mapping[str, str] | None = None


@functools.cache
def settings_statement(count: int) -> str:
    """One statement setting `count` settings for the transaction (names and values as parameters)."""
    return "SELECT " + ", ".join(["set_config(%s, %s, true)"] * count)


async def _set_all(conn: Connection, settings: Mapping[str, str]) -> None:
    """Queue the statement setting each of `settings` for the rest of the transaction."""
    await conn.execute(settings_statement(len(settings)), list(itertools.chain(*settings.items())))


@dataclass(frozen=True)
class PoolLimits:
    """What one call's database work may take: each statement at most `statement_seconds` (and never
    past the call's deadline), and one namespace at most `per_tenant` of the pool's connections at
    once (None: all of them), so one tenant's slow reads never hold every connection; a call waits
    for its turn at a connection `turn_seconds` at most (then UNAVAILABLE, `TENANT_CONNECTIONS`)."""

    statement_seconds: float = 10.0
    per_tenant: int | None = None
    turn_seconds: float = 2.0


# How often a database that stopped answering is tried again, with a fresh connection each time, and how long
# one try may take.
RECONNECT_SECONDS = 0.25
_TRY_SECONDS = 2.0


class Database:
    def __init__(
        self,
        conninfo: str,
        pool: AsyncConnectionPool,
        limits: PoolLimits = PoolLimits(),
        new_pool: Callable[[], AsyncConnectionPool] | None = None,
    ) -> None:
        self.conninfo = conninfo
        self._pool = pool
        # A pool like the first, for starting over once the database answers again.
        self._new_pool = new_pool
        self._limits = limits
        # Why the database does not answer, while it does not (a fresh connection failed): calls fail at once.
        self.unreachable: str | None = None
        self._recovering: asyncio.Task[None] | None = None
        # Set by `check`: a recovery under way tries a fresh connection now, not at its next turn.
        self._try_now = asyncio.Event()
        self._closing: set[asyncio.Task[None]] = set()
        self._turns = _TenantTurns(pool.max_size, limits.per_tenant, timeout=limits.turn_seconds)
        # With read replicas (set by `Databases.open`): each transaction's commit notes its WAL
        # position on the call's `CallPosition`, so the caller can read its writes from a replica.
        self.track_writes = False

    @classmethod
    async def open(
        cls,
        conninfo: str,
        session_settings: str = "",
        # Kept open: the default ranking's search reads on up to three at once, each taken only while one is idle.
        min_size: int = 3,
        max_size: int = 10,
        wait: bool = True,
        limits: PoolLimits = PoolLimits(),
        prepare: Callable[[psycopg.AsyncConnection], Awaitable[None]] | None = None,
    ) -> Database:
        """The pool; each new connection runs `session_settings` (SQL `SET`s) once, and is given to
        `prepare`, if any. Without `wait`, the pool connects in the background (a read replica that is
        down must not stop a start)."""

        async def configure(conn: psycopg.AsyncConnection) -> None:
            if prepare is not None:
                await prepare(conn)
            await register_vector_async(conn)
            if session_settings:
                await conn.execute(session_settings)
            if await bypasses_row_security(conn):
                await conn.execute(f"SET ROLE {SERVICE_ROLE}")
            await conn.commit()

        # A short wait for a connection: when the database is down, callers hear
        # so quickly, and injection fails open well within an agent's deadline.
        # Autocommit: a read is one round trip (no BEGIN before it, no COMMIT or ROLLBACK after: its
        # pipeline's sync ends its transaction); writes open their transactions explicitly.
        def new_pool() -> AsyncConnectionPool:
            return AsyncConnectionPool(
                conninfo,
                min_size=min_size,
                max_size=max_size,
                kwargs={"autocommit": True},
                configure=configure,
                open=False,
                timeout=2.0,
            )

        pool = new_pool()
        await pool.open(wait=wait, timeout=30.0)
        return cls(conninfo, pool, limits, new_pool)

    async def close(self) -> None:
        if self._recovering is not None:
            self._recovering.cancel()
            await asyncio.gather(self._recovering, return_exceptions=True)
        await asyncio.gather(*self._closing, return_exceptions=True)
        await self._pool.close()

    async def check(self) -> None:
        """After the database restarted: a recovery under way (calls refused while it is `unreachable`) tries a
        fresh connection at once rather than at its next turn, and is waited for, up to one try's time; then
        every idle connection is checked, those that were lost replaced. So once this returns, a database that
        answers takes the next call, on the first try."""
        recovering = self._recovering
        if recovering is not None and not recovering.done():
            self._try_now.set()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(_TRY_SECONDS + RECONNECT_SECONDS):
                    await asyncio.shield(recovering)
        await self._pool.check()

    def connection(self, namespace: str) -> NamespaceConnection:
        """A pooled connection acting for `namespace`: it sees and writes that namespace's rows only."""
        return NamespaceConnection(self, namespace)

    async def read(
        self, namespace: str, query: Query, params: Params, settings: Mapping[str, str] | None = None
    ) -> list[dict[str, Any]]:
        """The rows of one read acting for `namespace`, in one round trip: its namespace and `settings`
        (for this transaction only) and the query go out together, pipelined, and the pipeline's sync
        ends the transaction, so the namespace lasts for this read only at one round trip's cost."""
        (rows,) = await self.read_all(namespace, [Read(query, params, settings)])
        return rows

    async def read_all(
        self, namespace: str, reads: Sequence[Read], apart: Sequence[int] = ()
    ) -> list[list[dict[str, Any]]]:
        """The rows of each of `reads`, in one transaction and one round trip (as `read`): each
        statement runs after its settings are set (the first's with the namespace's, in one statement),
        and they last the rest of the transaction. With `apart` (places to split `reads` at, the first the one
        most worth it), the reads run on as many connections at once as are spare (`_TenantTurns.spare`, each one
        idle in the pool): split at the first place on two, at the first two on three, and so on, each part on a
        connection of its own, in a transaction with a snapshot of its own, which Postgres runs side by side."""
        self._refuse_while_unreachable()
        splits = sorted({at for at in apart if 0 < at < len(reads)}, key=list(apart).index)
        try:
            async with contextlib.AsyncExitStack() as more:
                await more.enter_async_context(self._turns.turn(namespace))
                connections = [cast(Connection, await more.enter_async_context(self._pool.connection()))]
                while len(connections) <= len(splits) and self._turns.spare(namespace) and self._idle():
                    await more.enter_async_context(self._turns.turn(namespace))
                    connections.append(cast(Connection, await more.enter_async_context(self._pool.connection())))
                if len(connections) == 1:
                    return await self._pipelined(connections[0], namespace, reads)
                places = [0, *sorted(splits[: len(connections) - 1]), len(reads)]
                parts = [reads[start:end] for start, end in itertools.pairwise(places)]
                # A task group: no connection goes back to the pool before its pipeline has ended, whatever fails
                # or is cancelled; the first failure is raised as itself. The last part goes out first: the longer
                # (a search's words), it is not held back by the others' sending.
                try:
                    async with asyncio.TaskGroup() as group:
                        tasks = [
                            group.create_task(self._pipelined(conn, namespace, part))
                            for conn, part in reversed(list(zip(connections, parts, strict=True)))
                        ]
                except BaseExceptionGroup as failed:
                    raise failed.exceptions[0] from None
                return [rows for task in reversed(tasks) for rows in task.result()]
        except (psycopg.OperationalError, TimeoutError) as error:
            raise self.refusal(error) from error

    def _idle(self) -> bool:
        """Whether the pool holds a connection open and idle: taking it waits for no new one."""
        return self._pool.get_stats().get("pool_available", 0) > 0

    async def _pipelined(self, conn: Connection, namespace: str, reads: Sequence[Read]) -> list[list[dict[str, Any]]]:
        """The rows of each of `reads` on `conn`, in one transaction and one round trip (`read_all`)."""
        conn.row_factory = dict_row
        async with conn.pipeline():
            # No BEGIN and no COMMIT: what the pipeline sends up to its sync is one transaction (the
            # extended protocol's, which the Sync ends), and the settings last until it ends.
            cursors = []
            for index, read in enumerate(reads):
                settings = self._acting_for(namespace) if index == 0 else {}
                settings.update(read.settings or {})
                if settings:
                    await _set_all(conn, settings)
                cursors.append(await conn.execute(read.query, read.params))
        # The pipeline's end sends its one Sync and takes every result: a Sync asked for within it as well
        # cost a round trip more (about 0.07 ms a read on this machine).
        return [await cursor.fetchall() for cursor in cursors]

    async def begin(self, conn: Connection, namespace: str) -> None:
        """Queue (in pipeline mode) a transaction's start, acting for `namespace` until it ends, with
        its statements' time limit: the server's longest, or what the call's deadline leaves."""
        await conn.execute("BEGIN")
        await _set_all(conn, self._acting_for(namespace))

    def _acting_for(self, namespace: str) -> dict[str, str]:
        """A transaction's settings acting for `namespace`: the namespace row-level security reads, and
        its statements' time limit (the server's longest, or what the call's deadline leaves)."""
        return {NAMESPACE_SETTING: namespace, "statement_timeout": f"{self._statement_ms()}ms"}

    def _statement_ms(self) -> int:
        limit = self._limits.statement_seconds
        left = _deadline_left()
        if left is not None:
            limit = min(limit, left)
        return max(1, int(limit * 1000))

    def refusal(self, error: BaseException) -> ServiceError:
        """What a caller is told of a database error: a statement cut off by the caller's deadline or by the
        server's longest, the database out of reach (a lost connection, checked at once with the others),
        a primary that turned read-only (the pool starts over on the one that takes writes now), or no
        connection free in time."""
        if isinstance(error, psycopg.errors.QueryCanceled):
            left = _deadline_left()
            if left is not None and left <= _DEADLINE_SLACK:
                return DeadlineReached(
                    "DEADLINE_EXCEEDED", "the call's deadline came before its database work was done: nothing is kept"
                )
            return StatementTimeout(
                "STATEMENT_TIMEOUT",
                f"a statement of the call passed its time, the server's longest ({self._limits.statement_seconds:g} s):"
                " narrow its filter or scope; nothing is kept",
            )
        if isinstance(error, psycopg.errors.ReadOnlySqlTransaction):
            self._connection_lost(moved=True)
            return Unavailable(
                "PRIMARY_READ_ONLY",
                "the database refused a write as read-only (a primary demoted, or a standby): reconnecting to the"
                " primary; nothing is kept, retry",
            )
        if isinstance(error, psycopg.OperationalError):
            self._connection_lost()
        if isinstance(error, _NoTurn):
            return Unavailable("TENANT_CONNECTIONS", str(error))
        return Unavailable("DEPENDENCY_UNAVAILABLE", f"database unavailable: {error}")

    def _connection_lost(self, moved: bool = False) -> None:
        """A connection was lost (the database restarted or died, or the network failed), or the primary
        `moved` (it refused a write as read-only): `_recover`, unless already under way. A primary that moved
        is left at once: the calls after the refusal fail at once too, not each refused by it in turn while a
        fresh connection looks for the one that takes writes now."""
        if self._recovering is None or self._recovering.done():
            if moved:
                self.unreachable = "the primary refused a write as read-only"
            self._recovering = asyncio.get_running_loop().create_task(self._recover(moved))

    async def _recover(self, moved: bool) -> None:
        """When the database still answers a fresh connection and has not moved, the pool's idle connections
        are checked (and the lost ones replaced), so each does not fail a call first. Otherwise, until a
        fresh connection reaches it (every `RECONNECT_SECONDS`), calls fail at once; then the pool starts
        over with new connections, as the pool's own retries of the lost ones back off to minutes."""
        self._try_now.clear()
        reason = await self._try()
        if reason is None and not moved:
            await self._pool.check()
            return
        if reason is not None:
            self.unreachable = reason
            logger.warning("tried=<%s> reason=<%s> | the database does not answer | trying again", self._where, reason)
        while reason is not None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(RECONNECT_SECONDS):
                    await self._try_now.wait()
            self._try_now.clear()
            reason = await self._try()
        if self._new_pool is not None:
            old, self._pool = self._pool, self._new_pool()
            await self._pool.open(wait=False)
            closing = asyncio.get_running_loop().create_task(old.close())
            self._closing.add(closing)
            closing.add_done_callback(self._closing.discard)
        self.unreachable = None
        logger.info("tried=<%s> | the database answers | serving with new connections", self._where)

    async def _try(self) -> str | None:
        """Why a fresh connection cannot reach the database now, None when it can."""
        try:
            async with asyncio.timeout(_TRY_SECONDS):
                conn = await psycopg.AsyncConnection.connect(self.conninfo, autocommit=True)
                await conn.close()
        except (psycopg.Error, TimeoutError, OSError) as error:
            return " ".join(str(error).split()) or type(error).__name__
        return None

    @property
    def _where(self) -> str:
        return described(self.conninfo)

    def _refuse_while_unreachable(self) -> None:
        """A call fails at once, rather than waiting for a connection, while the database does not answer."""
        if self.unreachable is not None:
            raise Unavailable(
                "DEPENDENCY_UNAVAILABLE", f"database unavailable: {self.unreachable} (reconnecting): retry"
            )

    @property
    def min_size(self) -> int:
        """The connections the pool keeps open, idle or not."""
        return self._pool.min_size

    def stats(self) -> dict[str, int]:
        """The pool's size and use, for metrics."""
        stats = self._pool.get_stats()
        return {
            "size": stats.get("pool_size", 0),
            "available": stats.get("pool_available", 0),
            "waiting": stats.get("requests_waiting", 0),
            "max": self._pool.max_size,
        }


class NamespaceConnection:
    """A pooled connection yielding dict rows, acting for one namespace, in one transaction.

    The namespace is set for that transaction only (`set_config(…, true)`, sent with its
    `BEGIN` in one round trip): a connection back in the pool acts for no one, so nothing
    that reaches it later without setting a namespace sees any tenant's rows. The
    transaction commits when the block ends and rolls back when it raises.
    """

    def __init__(self, database: Database, namespace: str) -> None:
        self._database = database
        self._turn = database._turns.turn(namespace)
        self._context: AbstractAsyncContextManager[psycopg.AsyncConnection] | None = None
        self._namespace = namespace
        self._conn: Connection | None = None
        self._pipeline: AbstractAsyncContextManager[psycopg.AsyncPipeline] | None = None

    async def __aenter__(self) -> Connection:
        self._database._refuse_while_unreachable()
        try:
            await self._turn.__aenter__()
        except TimeoutError as error:
            raise self._database.refusal(error) from error
        # The pool of now: it is replaced when the database moved.
        context = self._context = self._database._pool.connection()
        try:
            conn = cast(Connection, await context.__aenter__())
            conn.row_factory = dict_row
            self._conn = conn
            # Pipelined: the BEGIN and the namespace go out with the block's first statement, in one round trip.
            self._pipeline = conn.pipeline()
            await self._pipeline.__aenter__()
            await self._database.begin(conn, self._namespace)
        except (psycopg.Error, TimeoutError) as error:
            if self._conn is not None:
                await context.__aexit__(type(error), error, error.__traceback__)
            await self._turn.__aexit__(None, None, None)
            raise self._database.refusal(error) from error
        return conn

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        conn = self._conn
        ending: psycopg.Error | None = None
        call = CALL_POSITION.get() if self._database.track_writes and exc is None else None
        position: psycopg.AsyncCursor[dict[str, Any]] | None = None
        try:
            if conn is not None and not conn.closed:
                await conn.execute("COMMIT" if exc is None else "ROLLBACK")
                if call is not None:
                    # In the same round trip as the COMMIT: the WAL reaches at least its record.
                    position = await conn.execute(POSITION_NOW)
            if self._pipeline is not None:
                await self._pipeline.__aexit__(exc_type, exc, tb)
            if call is not None and position is not None and (row := await position.fetchone()) is not None:
                call.wrote(lsn_value(row["lsn"]), int(row["at"]))
        except psycopg.Error as error:
            ending = error
        finally:
            assert self._context is not None
            await self._context.__aexit__(exc_type, exc or ending, tb)
            await self._turn.__aexit__(None, None, None)
        failure = exc or ending
        if isinstance(failure, psycopg.OperationalError | psycopg.errors.ReadOnlySqlTransaction):
            raise self._database.refusal(failure) from failure
        if exc is None and ending is not None:
            # The block went well and its commit did not: the caller must hear of it.
            raise ending


# A statement cut off within this of the call's deadline was cut off by it (the cancel's own round trip).
_DEADLINE_SLACK = 0.005


def _deadline_left() -> float | None:
    """Seconds left before the current call's deadline (negative once past); None without one."""
    position = CALL_POSITION.get()
    if position is None or position.deadline is None:
        return None
    return position.deadline - asyncio.get_running_loop().time()


class _NoTurn(TimeoutError):
    """A namespace's share of the pool's connections stayed taken for as long as a caller waits."""


class _TenantTurns:
    """Each namespace's turns at the pool's connections. A namespace holds at most `per_tenant` of them at
    once (None: no share of its own), and while every connection is taken, the next one freed goes to the
    waiting namespace that holds the fewest (the longest waiting among those): a tenant with many callers
    waits for its own turns, and another's one caller is served next, whatever the first has queued. A
    caller waits `timeout` at most (then UNAVAILABLE, `TENANT_CONNECTIONS`)."""

    def __init__(self, size: int, per_tenant: int | None, timeout: float) -> None:
        self._size = size
        self._per_tenant = per_tenant or size
        self._timeout = timeout
        self._held: collections.Counter[str] = collections.Counter()
        self._taken = 0
        # Each namespace's callers waiting for a turn, first come first; the namespaces in the order they came.
        self._waiting: dict[str, collections.deque[asyncio.Future[None]]] = {}

    @contextlib.asynccontextmanager
    async def turn(self, namespace: str) -> AsyncIterator[None]:
        await self._take(namespace)
        try:
            yield
        finally:
            self._give_back(namespace)

    def spare(self, namespace: str) -> bool:
        """Whether `namespace`, holding a turn, may take a second at once for the same call: nobody waits
        for a turn, its share allows one more, and the pool stays at most half taken with it, so a caller
        who comes next still finds connections free."""
        return not self._waiting and self._held[namespace] < self._per_tenant and (self._taken + 1) * 2 <= self._size

    async def _take(self, namespace: str) -> None:
        if self._taken < self._size and self._held[namespace] < self._per_tenant and not self._waiting:
            self._grant(namespace)
            return
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(namespace, collections.deque()).append(turn)
        self._hand_out()
        try:
            async with asyncio.timeout(self._timeout):
                await asyncio.shield(turn)
        except (TimeoutError, asyncio.CancelledError) as error:
            if turn.done() and not turn.cancelled():
                # Granted as the wait ended: the turn is given back, to whoever waits next.
                self._give_back(namespace)
            else:
                turn.cancel()
                self._forget(namespace, turn)
            if isinstance(error, TimeoutError):
                share = self._per_tenant if self._per_tenant < self._size else None
                raise _NoTurn(
                    f"this namespace holds {share} of the database's connections, its share: retry"
                    if share is not None and self._held[namespace] >= share
                    else "every database connection stayed taken: retry"
                ) from None
            raise

    def _grant(self, namespace: str) -> None:
        self._held[namespace] += 1
        self._taken += 1

    def _give_back(self, namespace: str) -> None:
        self._taken -= 1
        self._held[namespace] -= 1
        if not self._held[namespace]:
            del self._held[namespace]
        self._hand_out()

    def _hand_out(self) -> None:
        """Free connections to the waiting namespaces that hold the fewest, within their shares."""
        while self._taken < self._size:
            eligible = [name for name in self._waiting if self._held[name] < self._per_tenant]
            if not eligible:
                return
            # min keeps the first of equals: the namespace waiting longest.
            namespace = min(eligible, key=lambda name: self._held[name])
            turn = self._waiting[namespace].popleft()
            if not self._waiting[namespace]:
                del self._waiting[namespace]
            self._grant(namespace)
            turn.set_result(None)

    def _forget(self, namespace: str, turn: asyncio.Future[None]) -> None:
        queue = self._waiting.get(namespace)
        if queue is not None and turn in queue:
            queue.remove(turn)
            if not queue:
                del self._waiting[namespace]
