"""What the framework adapters (Strands, LangChain, the OpenAI Agents SDK, pydantic-ai, ADK) share: their
settings checked up front, an `AsyncClient` for whichever event loop asks, telling a report listener,
failing open."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hashlib
import json
import logging
from collections.abc import Callable, Iterator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

from . import _requests
from ._requests import InjectSettings
from .client import AsyncClient, InjectResult
from .v1 import injection_pb2

logger = logging.getLogger(__name__)

ReportListener = Callable[[injection_pb2.InjectionReport], None]


def per_call(setting: Any, context: Any) -> Any:
    """A setting for one call: a function of the framework's per-call value (an agent, a run's context)
    called with it, any other value as it is."""
    return setting(context) if callable(setting) else setting


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


Blocks = list[dict[str, Any]]
Message = TypeVar("Message")


@dataclass(frozen=True)
class Dialect(Generic[Message]):
    """How a framework's messages read: as contextfold's conversation (`converted`: each message kept
    with its index), whether one is a person's ask (`asks`, given the converted message and the
    framework's), the framework's message with text after its content (`with_text`), and the bytes
    that identify one message (`identity`)."""

    converted: Callable[[Sequence[Message]], list[tuple[int, dict[str, Any]]]]
    asks: Callable[[dict[str, Any], Message], bool]
    with_text: Callable[[Message, Sequence[str]], Message]
    identity: Callable[[Message], bytes]


@dataclass
class Fold(Generic[Message]):
    """One model call's messages: as the service reads them (`sent`, blocks remembered as
    `InjectedBlock`s), where each of those is among the framework's (`positions`), as the model will
    see them (`shown`), each ask's key (by index), the latest ask, and the call's options."""

    sent: list[dict[str, Any]]
    positions: list[int]
    shown: list[Message]
    keys: dict[int, str]
    latest: int | None
    options: dict[str, Any]


class Remembering(Generic[Message]):
    """Injection for frameworks that keep nothing of what the model saw (their hooks change only the
    request): what was folded into each ask is remembered here, under the hash of the scope and of
    the messages up to and including it, so a tool loop's later steps show it again without a call
    and a later turn that replays the messages shows it and sends it back (new entries only). The
    newest `most` asks are remembered. `context` is the framework's per-run value that `scope` and
    `stores`, when functions, are called with."""

    def __init__(
        self,
        dialect: Dialect[Message],
        adapter: str,
        client: AsyncClient | None,
        target: str | None,
        timeout: float,
        on_report: ReportListener | None,
        scope: Any,
        stores: Any,
        most: int,
        options: InjectSettings,
        log: logging.Logger,
    ) -> None:
        self._dialect = dialect
        self._options = checked(options, adapter)
        self._clients = LoopClients(client, target, timeout)
        self._timeout = timeout
        self._on_report = on_report
        self._scope = scope
        self._stores = stores
        self._most = most
        self._remembered: collections.OrderedDict[str, Blocks] = collections.OrderedDict()
        self._failing_open = FailingOpen(log, "the model sees the messages as they were").attempt

    async def fold(
        self, messages: list[Message], context: Any, kept: MutableMapping[str, Blocks] | None = None
    ) -> list[Message]:
        """The messages the model gets: with what was remembered shown again, and a new ask injected into;
        as they were when anything fails (said once). With `kept` (a framework's state that outlives the
        process, each ask's blocks by its key, oldest first), what is remembered is kept there too, and
        found there first."""
        folded = messages
        with self._failing_open():
            fold = self._prepare(messages, context, kept)
            folded = fold.shown
            if fold.latest is not None and self._find(fold.keys[fold.latest], kept) is None:
                await self._ask(fold, kept)
        return folded

    def _find(self, key: str, kept: Mapping[str, Blocks] | None) -> Blocks | None:
        """An ask's blocks: kept in the framework's state, else in this process."""
        found = None if kept is None else kept.get(key)
        return self._remembered.get(key) if found is None else found

    def _prepare(self, messages: list[Message], context: Any, kept: Mapping[str, Blocks] | None) -> Fold[Message]:
        scope = per_call(self._scope, context)
        converted = self._dialect.converted(messages)
        # The conversation hashed as it is read: each ask's key is the hash so far (a copy), so a long
        # conversation is hashed once a call, not once for each of its asks.
        hashed = hashlib.sha256(json.dumps(scope, sort_keys=True, default=repr).encode() + b"\0")
        read = 0
        keys = {}
        for index, message in converted:
            for earlier in messages[read : index + 1]:
                hashed.update(self._dialect.identity(earlier) + b"\n")
            read = index + 1
            if self._dialect.asks(message, messages[index]):
                keys[index] = hashed.copy().hexdigest()
        shown = list(messages)
        sent = []
        for index, message in converted:
            blocks = self._find(keys.get(index, ""), kept) or []
            sent.append({**message, "content": [*message["content"], *({"injected": b} for b in blocks)]})
            if blocks:
                shown[index] = self._dialect.with_text(messages[index], [block["text"] for block in blocks])
        stores = per_call(self._stores, context) or ()
        options = {**self._options, "scope": scope, "stores": stores, "timeout": self._timeout}
        positions = [index for index, _ in converted]
        return Fold(sent, positions, shown, keys, max(keys) if keys else None, options)

    async def _ask(self, fold: Fold[Message], kept: MutableMapping[str, Blocks] | None) -> None:
        """Inject into the latest ask, showing and remembering what it adds (nothing: asked)."""
        assert fold.latest is not None
        result = await self._clients.get().inject(fold.sent, **fold.options)
        added = added_blocks(result, fold.sent, fold.positions, fold.latest, self._on_report)
        key = fold.keys[fold.latest]
        for remembered in (self._remembered, *(() if kept is None else (kept,))):
            remembered.pop(key, None)
            remembered[key] = added  # the newest last
            while len(remembered) > self._most:
                del remembered[next(iter(remembered))]
        fold.shown[fold.latest] = self._dialect.with_text(fold.shown[fold.latest], [block["text"] for block in added])

    async def close(self) -> None:
        await self._clients.close()


def added_blocks(
    result: InjectResult, sent: Sequence[dict[str, Any]], positions: Sequence[int], target: int,
    on_report: ReportListener | None,
) -> Blocks:  # fmt: skip
    """The injected blocks an `Inject` call added to the framework's message at `target` (its index among
    the framework's messages; `positions` maps the call's messages to those), its report told first."""
    tell(on_report, result.report)
    index = result.report.target_message_index
    if not (0 <= index < len(sent) and positions[index] == target):
        return []
    appended = result.messages[index]["content"][len(sent[index]["content"]) :]
    return [block["injected"] for block in appended if "injected" in block]
