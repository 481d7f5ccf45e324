"""What the framework adapters (Strands, LangChain, the OpenAI Agents SDK) share: their settings checked
up front, an `AsyncClient` for whichever event loop asks, telling a report listener, failing open."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterator
from typing import cast

from . import _requests
from ._requests import InjectSettings
from .client import AsyncClient
from .v1 import injection_pb2

logger = logging.getLogger(__name__)

ReportListener = Callable[[injection_pb2.InjectionReport], None]


def checked(options: InjectSettings, adapter: str) -> InjectSettings:
    """`options`, checked as `inject` will read them: bad ones fail when the adapter is made, not on the
    first turn (naming `adapter`)."""
    _requests.known(options, InjectSettings, adapter)
    _requests.inject([], cast("_requests.InjectOptions", options))
    return options


class FailingOpen:
    """Failing open: whatever fails inside `attempt()` is swallowed, said at WARNING on `log` once, and
    not again until an attempt goes through (said at INFO), so an outage is one line, not one a call."""

    def __init__(self, log: logging.Logger, what: str) -> None:
        self._log = log
        self._what = what
        self._failing = False

    @contextlib.contextmanager
    def attempt(self) -> Iterator[None]:
        try:
            yield
        except Exception as error:  # noqa: BLE001 - fail open: the model call goes on without new context.
            if not self._failing:
                self._failing = True
                self._log.warning(
                    "reason=<%s> | contextfold inject failed | %s (said once, until a call goes through)",
                    error,
                    self._what,
                )
            return
        if self._failing:
            self._failing = False
            self._log.info("contextfold inject answers again")


def tell(listener: ReportListener | None, report: injection_pb2.InjectionReport) -> None:
    """Give `report` to `listener`, if any: a listener that raises is the listener's problem, not injection's."""
    if listener is None:
        return
    try:
        listener(report)
    except Exception as error:  # noqa: BLE001 - a listener's failure is the listener's.
        logger.warning("reason=<%s> | contextfold on_report raised | injection goes on", error)


class LoopClients:
    """The given client, else one per event loop: a gRPC asyncio channel serves the loop it was
    made in, and a synchronous `agent(...)` runs each invocation in a loop of its own (a client
    whose loop has closed is dropped; its channel went with the loop). An agent driven from one
    loop (`invoke_async`, `stream_async`) keeps one connection."""

    def __init__(self, given: AsyncClient | None, target: str | None, timeout: float) -> None:
        self._given = given
        self._target = target
        self._timeout = timeout
        self._made: dict[asyncio.AbstractEventLoop, AsyncClient] = {}

    def get(self) -> AsyncClient:
        if self._given is not None:
            return self._given
        loop = asyncio.get_running_loop()
        for closed in [old for old in self._made if old.is_closed()]:
            del self._made[closed]
        if loop not in self._made:
            self._made[loop] = AsyncClient(self._target, timeout=self._timeout)
        return self._made[loop]

    async def close(self) -> None:
        """Close the clients made for this loop (the others' loops have ended, or will close them)."""
        loop = asyncio.get_running_loop()
        made, self._made = self._made, {}
        for owner, client in made.items():
            if owner is loop:
                await client.close()
            elif not owner.is_closed():
                asyncio.run_coroutine_threadsafe(client.close(), owner)
