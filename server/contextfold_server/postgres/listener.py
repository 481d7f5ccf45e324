"""One LISTEN connection that keeps every cache of this replica current.

A cache (the key ring, the provider directory) subscribes to a channel with two
callbacks: `changed(payload)`, for each change announced on it by NOTIFY, and
`reload()`, to read everything again. Every subscriber reloads after the
listener (re)connects, since changes may have been missed while it was away,
and again every `reload_seconds` in any case: a notification can be lost
without the connection seeming to be (a half-open TCP connection, a proxy that
drops it), and a revoked key must not keep working for as long as that lasts.
The periodic reload also proves the connection alive; one that fails is
replaced.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import psycopg
from psycopg import sql

logger = logging.getLogger(__name__)

DEFAULT_RELOAD_SECONDS = 30.0
_RECONNECT_SECONDS = 1.0


@dataclass(frozen=True)
class _Subscription:
    changed: Callable[[str], Awaitable[None]]
    reload: Callable[[], Awaitable[None]]


class ChangeListener:
    def __init__(self, conninfo: str, reload_seconds: float = DEFAULT_RELOAD_SECONDS) -> None:
        self._conninfo = conninfo
        self._reload_seconds = reload_seconds
        self._subscriptions: dict[str, _Subscription] = {}
        self._ready = asyncio.Event()
        self._task: asyncio.Task | None = None

    def subscribe(
        self, channel: str, changed: Callable[[str], Awaitable[None]], reload: Callable[[], Awaitable[None]]
    ) -> None:
        """Call `changed` with each payload announced on `channel`, and `reload` whenever changes may
        have been missed. Subscribe before `start`."""
        self._subscriptions[channel] = _Subscription(changed, reload)

    async def start(self, timeout: float = 30.0) -> None:
        """Listen, and return once every subscriber has loaded what there is."""
        self._task = asyncio.create_task(self._listen(), name="change-listener")
        await asyncio.wait_for(self._ready.wait(), timeout)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _reload_all(self) -> None:
        for subscription in self._subscriptions.values():
            await subscription.reload()

    async def _listen(self) -> None:
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(self._conninfo, autocommit=True) as conn:
                    for channel in self._subscriptions:
                        await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
                    # Listening first, then reloading, so no change falls between the two.
                    await self._reload_all()
                    self._ready.set()
                    while True:
                        async for notice in conn.notifies(timeout=self._reload_seconds):
                            await self._subscriptions[notice.channel].changed(notice.payload)
                        # Every interval, whatever came: the safety net, and a test of the connection.
                        await conn.execute("SELECT 1")
                        await self._reload_all()
            except asyncio.CancelledError:
                raise
            except Exception as error:  # noqa: BLE001 - keep what is cached; reconnect and reload.
                logger.warning("reason=<%s> | change listener lost its connection | reconnecting", error)
                await asyncio.sleep(_RECONNECT_SECONDS)
