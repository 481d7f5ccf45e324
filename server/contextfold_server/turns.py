"""A thread for the work of large requests that the event loop must not do, taken in turns per tenant."""

from __future__ import annotations

import asyncio
import collections
import functools
import sys
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")


class TenantThread:
    """One thread for the interpreter-bound work of large requests (a ranking weighing long candidates, a long
    question read), taken in turns by namespace: when a turn ends, its namespace goes behind the others waiting,
    and the next turn goes to the namespace first in line; a namespace's own callers go in the order they came.
    So a tenant whose callers queue many such requests delays another's by the one it is running at most. One
    thread, not several: the work holds the interpreter, and a second thread would only take turns with the
    first, and with the event loop, at the interpreter's switch interval."""

    def __init__(self, name: str) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        self._busy = False
        # Each namespace's callers waiting for a turn, first come first; the namespaces in the order they go next.
        self._waiting: dict[str, collections.deque[asyncio.Future[None]]] = {}

    async def run(self, namespace: str, work: Callable[..., T], *args: Any) -> T:
        """`work(*args)` on the thread, in `namespace`'s turn."""
        await self._take(namespace)
        try:
            return await asyncio.get_running_loop().run_in_executor(self._executor, functools.partial(work, *args))
        finally:
            self._give_back(namespace)

    async def _take(self, namespace: str) -> None:
        if not self._busy:
            self._busy = True
            return
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(namespace, collections.deque()).append(turn)
        try:
            await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():
                # Granted as the wait ended: the turn goes to whoever waits next.
                self._give_back(namespace)
            raise

    def _give_back(self, namespace: str) -> None:
        """`namespace`'s turn ended: it goes behind the others waiting, and the next turn to the namespace first
        in line (a caller that stopped waiting passed over), which goes behind them too if it has more waiting."""
        if namespace in self._waiting:
            self._waiting[namespace] = self._waiting.pop(namespace)
        while self._waiting:
            first = next(iter(self._waiting))
            queue = self._waiting.pop(first)
            turn = queue.popleft()
            if queue:
                self._waiting[first] = queue
            if not turn.done():
                turn.set_result(None)
                return
        self._busy = False


# How long a thread holding the interpreter keeps it while another waits for it: CPython's default is 5 ms. A
# worker's event loop waits that long for the interpreter at each step it takes while the worker's thread (or the
# model's tokenizer) computes, so beside another tenant's heaviest `Inject`s each of a small call's steps waited up
# to 5 ms. At 0.5 ms, in docs/performance.md's runs of that flood (two workers, the two settings taking turns), the
# other tenant's p50 was 37 to 41 ms against 53 to 68 ms, and its p90 111 to 135 against 156 to 202 ms; alone, and
# the flood's own rate, the same.
SWITCH_INTERVAL = 0.0005


def share_the_interpreter() -> None:
    """Set the process's switch interval (`SWITCH_INTERVAL`): a worker's, whose event loop must not wait on its
    threads' computing."""
    sys.setswitchinterval(SWITCH_INTERVAL)


# Each event loop's thread (a worker runs one loop): one per loop, so that a loop's futures are only ever awaited on it.
_THREADS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, TenantThread] = weakref.WeakKeyDictionary()


def worker_thread() -> TenantThread:
    """The worker's one thread for the interpreter-bound work of its requests that grows with them and so is not
    done on the event loop: a long question read and long candidates weighed (the search), a large conversation
    parsed (`Inject`), the blocks a conversation shows looked through (the engine), a long text's tokens counted
    (for a budget, and for the model's batches), a large request's data encoded for its customizations, a large
    body read by the mesh processor. Every
    tenant's such work takes turns on it, where asyncio's own threads would serve it first come first, several
    at once."""
    loop = asyncio.get_running_loop()
    thread = _THREADS.get(loop)
    if thread is None:
        thread = _THREADS[loop] = TenantThread("requests")
    return thread


class InTurns:
    """`work(*args)` on the worker's thread (`worker_thread`), in `namespace`'s turn."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace

    async def __call__(self, work: Callable[..., T], *args: Any) -> T:
        return await worker_thread().run(self.namespace, work, *args)
