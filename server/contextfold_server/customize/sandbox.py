"""The server's side of the sandbox: a few worker processes, each killed and replaced when it overruns.

Workers start with an empty environment (no database URL, no keys), and every
exchange with them is JSON: nothing a worker sends can make the server run code.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import struct
import sys
from typing import Any

from .worker import READY

logger = logging.getLogger(__name__)

_HEADER = struct.Struct(">I")


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


class Sandbox:
    def __init__(self, workers: int = 2, time_limit: float = 0.25) -> None:
        self.time_limit = time_limit
        self._size = workers
        self._idle: asyncio.Queue[asyncio.subprocess.Process] = asyncio.Queue()
        self._respawning: set[asyncio.Task] = set()

    async def start(self) -> None:
        for _ in range(self._size):
            self._idle.put_nowait(await self._spawn())

    async def close(self) -> None:
        await asyncio.gather(*self._respawning, return_exceptions=True)
        while not self._idle.empty():
            worker = self._idle.get_nowait()
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

    async def check(self, kind: str, source: str) -> str | None:
        """Why a `trigger` or `query` expression, or a `format` template, does not compile; None when it does."""
        try:
            await self.run(f"check-{kind}", source, None)
        except SandboxError as error:
            return str(error)
        return None

    async def run(self, kind: str, source: str, data: Any) -> Any:
        """Run a `trigger` or `query` expression, or a `format` template, on `data`."""
        return await self.run_encoded(encode(kind, source, data))

    async def run_encoded(self, payload: bytes) -> Any:
        """Run a request already encoded (`encode`), as a large one is, off the event loop."""
        worker = await self._idle.get()
        answered = False
        retired = False
        try:
            async with asyncio.timeout(self.time_limit):
                to_worker, from_worker = _pipes(worker)
                to_worker.write(payload)
                await to_worker.drain()
                (size,) = _HEADER.unpack(await from_worker.readexactly(_HEADER.size))
                reply = json.loads(await from_worker.readexactly(size))
            answered, retired = True, bool(reply.get("retire"))
        except TimeoutError:
            raise SandboxError(f"ran past its time limit of {self.time_limit * 1000:.0f} ms") from None
        except (asyncio.IncompleteReadError, ConnectionError) as error:
            raise SandboxError(f"its worker died: {type(error).__name__}") from None
        finally:
            # A worker that did not answer, for whatever reason (its time ran out, it died, or the
            # caller gave up), may still owe a reply: it is replaced, never handed to the next caller.
            if answered and not retired:
                self._idle.put_nowait(worker)
            else:
                self._replace(
                    worker, "retired: past its memory budget" if retired else "overrun, crash or cancellation"
                )
        if not reply["ok"]:
            raise SandboxError(reply["error"])
        return reply["value"]

    def _replace(self, worker: asyncio.subprocess.Process, reason: str) -> None:
        _kill(worker)
        logger.warning("reason=<%s> | sandbox worker replaced", reason)
        task = asyncio.get_running_loop().create_task(self._respawn(worker))
        self._respawning.add(task)
        task.add_done_callback(self._respawning.discard)

    async def _respawn(self, worker: asyncio.subprocess.Process) -> None:
        await worker.wait()
        while True:
            try:
                self._idle.put_nowait(await self._spawn())
                return
            except (OSError, RuntimeError, asyncio.IncompleteReadError) as error:
                # The pool must heal: a worker that cannot start now is tried again.
                logger.error("reason=<%s> | sandbox worker failed to start | retrying in 1s", error)
                await asyncio.sleep(1.0)


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
