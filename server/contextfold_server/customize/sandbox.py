"""The server's side of the sandbox: a few worker processes, each killed and replaced when it overruns.

Workers start with an empty environment (no database URL, no keys), and every
exchange with them is JSON: nothing a worker sends can make the server run code.

Workers are shared fairly: a free worker goes to the tenants waiting in turn
(round robin over namespaces, first come first served within one), so one
tenant's many or slow expressions make its own calls wait, not everyone's. A
wait is bounded by the caller's time: a call that cannot get a worker in time
hears so (`SandboxTimeout`) rather than running past its deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import struct
import sys
from collections import OrderedDict, deque
from typing import Any

from ..observe.logs import warn_throttled
from .worker import READY

logger = logging.getLogger(__name__)

_HEADER = struct.Struct(">I")
_COMPILED_KEPT = 4096


# What a worker's environment holds: only where to find contextfold's code, if it was given.
_PASSED_ON = ("PYTHONPATH",)


def encode(kind: str, source: str, data: Any) -> bytes:
    """A request as the worker reads it: a length, then JSON."""
    return encode_with_json(kind, source, json.dumps(data))


def encode_with_json(kind: str, source: str, data_json: str) -> bytes:
    """`encode`, with the data already in JSON: one request's context, encoded once for all its expressions."""
    head = json.dumps({"kind": kind, "source": source})[:-1]
    payload = f'{head}, "data": {data_json}}}'.encode()
    return _HEADER.pack(len(payload)) + payload


class SandboxError(Exception):
    """An expression or template failed, ran past its time, or took its worker down; the message says which."""


class SandboxFailed(SandboxError):
    """The sandbox itself failed (its worker died, or answered what no worker sends): no verdict on the
    expression, which may well be sound; retrying may work."""


class SandboxTimeout(SandboxError):
    """Out of time: the run passed the sandbox's time limit, or the caller's time ran out first
    (`callers_time`), waiting for a worker or while one ran."""

    def __init__(self, message: str, callers_time: bool) -> None:
        super().__init__(message)
        self.callers_time = callers_time


class Sandbox:
    def __init__(self, workers: int = 2, time_limit: float = 0.25) -> None:
        self.time_limit = time_limit
        self._size = workers
        self._workers = _FairShare()
        # Sources known to compile (by kind and digest), the least recently checked forgotten first.
        self._compiled: OrderedDict[tuple[str, bytes], None] = OrderedDict()
        self._respawning: set[asyncio.Task] = set()

    async def start(self) -> None:
        for _ in range(self._size):
            self._workers.release(await self._spawn())

    async def close(self) -> None:
        await asyncio.gather(*self._respawning, return_exceptions=True)
        for worker in self._workers.take_idle():
            _kill(worker)
            await worker.wait()

    @staticmethod
    async def _spawn() -> asyncio.subprocess.Process:
        """A worker that has loaded its engines and said it is ready."""
        worker = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "contextfold_server.customize.worker",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            env={name: os.environ[name] for name in _PASSED_ON if name in os.environ},
        )
        if await _pipes(worker)[1].readexactly(len(READY)) != READY:
            raise RuntimeError("the sandbox worker did not start")
        return worker

    async def check(self, kind: str, source: str, tenant: str, within: float | None = None) -> str | None:
        """Why a `trigger` or `query` expression, or a `format` template, does not compile; None when it
        does. Raises `SandboxTimeout` when the caller's time (`within` seconds) ran out before it could
        be told (one that compiles for longer than the sandbox's time limit does not compile), and
        `SandboxFailed` when the sandbox could not tell (its worker died, or the machine's load kept
        it from running for half its time limit: wall time alone says nothing of the source)."""
        key = (kind, hashlib.sha256(source.encode()).digest())
        if key in self._compiled:
            self._compiled.move_to_end(key)
            return None
        try:
            await self.run(f"check-{kind}", source, None, tenant, within)
        except SandboxTimeout as timeout:
            if timeout.callers_time:
                raise
            return str(timeout)
        except SandboxFailed:
            raise
        except SandboxError as error:
            return str(error)
        # What compiled once compiles again: an agent sending the same template each call has it
        # checked once, not at each call.
        self._compiled[key] = None
        if len(self._compiled) > _COMPILED_KEPT:
            self._compiled.popitem(last=False)
        return None

    async def run(self, kind: str, source: str, data: Any, tenant: str, within: float | None = None) -> Any:
        """Run a `trigger` or `query` expression, or a `format` template, on `data`."""
        return await self.run_encoded(encode(kind, source, data), tenant, within)

    async def run_encoded(self, payload: bytes, tenant: str, within: float | None = None) -> Any:
        """Run a request already encoded (`encode`), as a large one is, off the event loop, for `tenant`
        (whose turn it waits for), within the caller's `within` seconds (None: no deadline)."""
        loop = asyncio.get_running_loop()
        deadline = None if within is None else loop.time() + within
        try:
            async with asyncio.timeout_at(deadline):
                worker = await self._workers.acquire(tenant)
        except TimeoutError:
            raise SandboxTimeout("no sandbox worker was free before the caller's deadline", True) from None
        limit = self.time_limit if deadline is None else min(self.time_limit, deadline - loop.time())
        answered = False
        retired = False
        ran_before = _cpu_seconds(worker.pid)
        try:
            async with asyncio.timeout(limit):
                to_worker, from_worker = _pipes(worker)
                to_worker.write(payload)
                await to_worker.drain()
                (size,) = _HEADER.unpack(await from_worker.readexactly(_HEADER.size))
                reply = json.loads(await from_worker.readexactly(size))
            answered, retired = True, bool(reply.get("retire"))
        except TimeoutError:
            if limit < self.time_limit:
                raise SandboxTimeout(
                    f"the caller's deadline came after {limit * 1000:.0f} ms of running", True
                ) from None
            ran_after = _cpu_seconds(worker.pid)
            ran = None if ran_before is None or ran_after is None else ran_after - ran_before
            if ran is not None and ran < self.time_limit / 2:
                # The worker hardly ran in that time: the machine was busy, not the source slow. No
                # verdict on the source (an expression is not refused for the server's load).
                raise SandboxFailed(
                    f"had {ran * 1000:.0f} ms of CPU in its {self.time_limit * 1000:.0f} ms: the machine is busy"
                ) from None
            raise SandboxTimeout(f"ran past its time limit of {self.time_limit * 1000:.0f} ms", False) from None
        except (asyncio.IncompleteReadError, ConnectionError, OSError) as error:
            raise SandboxFailed(f"its worker died: {type(error).__name__}") from None
        except (ValueError, struct.error) as error:
            raise SandboxFailed(f"its worker answered what no worker sends: {type(error).__name__}") from None
        finally:
            # A worker that did not answer, for whatever reason (its time ran out, it died, or the
            # caller gave up), may still owe a reply: it is replaced, never handed to the next caller.
            if answered and not retired:
                self._workers.release(worker)
            else:
                self._replace(
                    worker, "retired: past its memory budget" if retired else "overrun, crash or cancellation"
                )
        if not isinstance(reply, dict) or "ok" not in reply:
            raise SandboxFailed("its worker answered what no worker sends")
        if not reply["ok"]:
            raise SandboxError(str(reply.get("error", "failed")))
        return reply.get("value")

    def _replace(self, worker: asyncio.subprocess.Process, reason: str) -> None:
        _kill(worker)
        warn_throttled(logger, reason, "reason=<%s> | sandbox worker replaced", reason)
        task = asyncio.get_running_loop().create_task(self._respawn(worker))
        self._respawning.add(task)
        task.add_done_callback(self._respawning.discard)

    async def _respawn(self, worker: asyncio.subprocess.Process) -> None:
        await worker.wait()
        while True:
            try:
                self._workers.release(await self._spawn())
                return
            except (OSError, RuntimeError, asyncio.IncompleteReadError) as error:
                # The pool must heal: a worker that cannot start now is tried again.
                logger.error("reason=<%s> | sandbox worker failed to start | retrying in 1s", error)
                await asyncio.sleep(1.0)


class _FairShare:
    """Idle workers, and the callers waiting for one, queued per tenant and served in turn."""

    def __init__(self) -> None:
        self._idle: list[asyncio.subprocess.Process] = []
        # Each waiting tenant's callers, first come first; the tenants in the order they are served.
        self._waiting: OrderedDict[str, deque[asyncio.Future[asyncio.subprocess.Process]]] = OrderedDict()

    async def acquire(self, tenant: str) -> asyncio.subprocess.Process:
        if self._idle and not self._waiting:
            return self._idle.pop()
        waiter: asyncio.Future[asyncio.subprocess.Process] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(tenant, deque()).append(waiter)
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                # Handed a worker just as the caller gave up: it goes to the next in turn.
                self.release(waiter.result())
            else:
                self._forget(tenant, waiter)
            raise

    def release(self, worker: asyncio.subprocess.Process) -> None:
        """A worker is free: it goes to the next tenant in turn, or is kept idle."""
        while self._waiting:
            tenant, waiters = next(iter(self._waiting.items()))
            waiter = waiters.popleft()
            if waiters:
                self._waiting.move_to_end(tenant)
            else:
                del self._waiting[tenant]
            if not waiter.done():
                waiter.set_result(worker)
                return
        self._idle.append(worker)

    def take_idle(self) -> list[asyncio.subprocess.Process]:
        idle, self._idle = self._idle, []
        return idle

    def _forget(self, tenant: str, waiter: asyncio.Future[asyncio.subprocess.Process]) -> None:
        waiters = self._waiting.get(tenant)
        if waiters is not None and waiter in waiters:
            waiters.remove(waiter)
            if not waiters:
                del self._waiting[tenant]


def _cpu_seconds(pid: int) -> float | None:
    """The CPU time (user and system) process `pid` has used, from /proc: one small read. None when
    it cannot be read (the process is gone, or there is no /proc): that run is judged by wall time."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def _pipes(worker: asyncio.subprocess.Process) -> tuple[asyncio.StreamWriter, asyncio.StreamReader]:
    """The worker's stdin and stdout, which `_spawn` always opens as pipes."""
    if worker.stdin is None or worker.stdout is None:
        raise SandboxError("the worker has no pipes")
    return worker.stdin, worker.stdout


def _kill(worker: asyncio.subprocess.Process) -> None:
    """Kill a worker that may have ended already: a signal to the whole process group (Ctrl-C in
    a terminal) reaches the workers too, and stopping must not fail on a worker that is gone."""
    with contextlib.suppress(ProcessLookupError):
        if worker.returncode is None:
            worker.kill()
