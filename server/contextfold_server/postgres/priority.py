"""A bulk worker's database sessions at its own lower CPU priority, where they run on this machine.

Postgres runs each session as a process of its own. When the database is the embedded one (started
by the supervisor, on this machine, in this process's process namespace), the bulk worker lowers
the CPU priority of the sessions it opens to its own (`--bulk-nice`), so that the kernel prefers
the sessions that serve queries wherever both want a core, as it prefers the workers themselves.
A database elsewhere runs every session at its own priority: its cores are not the workers'.
Lowering a priority needs no privilege; raising it back would, and is never done: these sessions
serve bulk work for as long as they live.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable

import psycopg

logger = logging.getLogger(__name__)


def lower_priority_of_sessions(nice: int) -> Callable[[psycopg.AsyncConnection], Awaitable[None]]:
    """What prepares each new session of a bulk worker's: its process reniced to `nice` (never raised)."""

    async def lower(conn: psycopg.AsyncConnection) -> None:
        pid = conn.info.backend_pid
        try:
            if os.getpriority(os.PRIO_PROCESS, pid) < nice:
                os.setpriority(os.PRIO_PROCESS, pid, nice)
        except OSError as error:
            # The session still serves, at the database's priority.
            logger.warning("pid=<%d> reason=<%s> | a bulk database session keeps its priority", pid, error)

    return lower


async def own_session(
    conninfo: str, prepare: Callable[[psycopg.AsyncConnection], Awaitable[None]] | None
) -> psycopg.AsyncConnection:
    """A session of the login role's own, outside the pool (autocommit), made ready by `prepare` if any (a bulk
    worker's lowers its priority): what the bulk worker's background work (vector indexes, statistics) runs on."""
    conn = await psycopg.AsyncConnection.connect(conninfo, autocommit=True)
    if prepare is not None:
        await prepare(conn)
    return conn
