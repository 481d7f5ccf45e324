"""contextfold for Strands Agents (`strands-agents`): injection as a plugin, memory as a store.

    from strands import Agent
    from contextfold.strands import ContextInjection, ContextfoldMemoryStore, from_state

    agent = Agent(
        model=model,
        plugins=[ContextInjection(stores=["prefs"], scope=from_state("user"), timeout=0.5)],
        memory_manager={"stores": [ContextfoldMemoryStore("prefs")], "injection": False},
    )

`ContextInjection` calls `Inject` before each model call (the SDK's
`InvokeModelStage.Input` middleware) and hands the model the folded messages,
each injected block shown as the text block it stands for. The agent's own
messages are never changed: what was injected is kept in the agent's state (key
`contextfold`), shown again with the message it was folded into on every later
call, and sent to the service as the `InjectedBlock`s it was, so no entry is
injected twice while the model still sees it (as an SDK that keeps `InjectedBlock`s
in its history would). Whatever goes wrong on the way (the service down or
slower than `timeout`, a conversation it cannot send, a listener that raises),
the model call goes on with the messages it had.

`ContextfoldMemoryStore` is a Strands memory store on contextfold's
`MemoryService`, so the `search_memory` and `add_memory` tools and extraction
use the shared service. Install with `pip install 'contextfold[strands]'`.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, cast

from google.protobuf import json_format
from strands.memory import MemoryEntry
from strands.middleware.stages import InvokeModelStage
from strands.plugins.plugin import Plugin

from ._adapters import LoopClients, ReportListener, checked, per_call, tell
from ._requests import InjectSettings, ScopeLike
from .client import AsyncClient

if TYPE_CHECKING:
    from strands.memory.types import SearchOptions
    from strands.middleware.stages import InvokeModelContext
    from strands.types.content import Message
    from typing_extensions import Unpack

logger = logging.getLogger(__name__)

# The agent's state key under which every ContextInjection keeps what it injected, by its name.
STATE_KEY = "contextfold"


def from_state(key: str) -> Callable[[Any], Any]:
    """Read a call's setting from the agent's state: `scope=from_state("user")` uses whatever
    `agent.state.get("user")` holds at that call (a scope dict; for `stores`, a list of names)."""
    return lambda agent: agent.state.get(key)


class ContextInjection(Plugin):
    """Folds contextfold's injection into every model call of the agent it is registered on.

    `options` are `Client.inject`'s settings (`InjectSettings`): trigger ("user_turn" or "every_turn", or
    Strands' "userTurn" and "everyTurn"), max_entries, query, min_score, format, ranking, filter,
    providers, max_tokens, coalesce, and the rest. `scope` and `stores` are values, or functions
    of the agent deriving them for each call (`from_state(key)` reads a state key), so one agent
    process can serve many users. `timeout` (seconds) bounds each call; past it the model sees
    the conversation as it was. `on_report` receives each call's `InjectionReport`.

    `name` tells instances apart: several may serve one agent (one per provider set, say), each
    folding its own blocks. The plugin's client (an `AsyncClient` per event loop, unless one is
    given) is closed by `close()`; a client passed in is the caller's to close.
    """

    def __init__(
        self,
        client: AsyncClient | None = None,
        *,
        name: str = "contextfold:injection",
        target: str | None = None,
        timeout: float = 1.0,
        on_report: ReportListener | None = None,
        scope: ScopeLike | Callable[[Any], ScopeLike] = None,
        stores: Sequence[str] | Callable[[Any], Sequence[str] | None] = (),
        **options: Unpack[InjectSettings],
    ) -> None:
        self._name = name
        super().__init__()
        checked(options, "ContextInjection")
        self._clients = LoopClients(client, target, timeout)
        self._timeout = timeout
        self._on_report = on_report
        self._scope = scope
        self._stores = stores
        self._options = options

    @property
    def name(self) -> str:
        return self._name

    def init_agent(self, agent: Any) -> None:
        agent.add_middleware(InvokeModelStage.Input, self._fold)

    async def close(self) -> None:
        """Close the client this plugin made (a client passed in is the caller's to close)."""
        await self._clients.close()

    async def _fold(self, context: InvokeModelContext) -> InvokeModelContext:
        try:
            agent = context.agent
            state = agent.state.get()
            ledger = _Ledger(state.pop(STATE_KEY, None) or {}, self.name)
            sent, shown = ledger.conversation(context.messages)
        except Exception as error:  # noqa: BLE001 - fail open: the model call goes on without injection.
            logger.warning("reason=<%s> | contextfold plugin failed | model sees the conversation as it was", error)
            return context
        try:
            await self._folded(context, state, ledger, sent, shown)
        except Exception as error:  # noqa: BLE001 - fail open: the model call goes on without new context.
            # What was injected before is the agent's own (its state): shown again whatever the service
            # does, so an outage takes nothing from the model and keeps the conversation's prefix.
            logger.warning("reason=<%s> | contextfold inject failed | model sees what was injected before", error)
        agent.state.set(STATE_KEY, ledger.entries)
        trailing = len(shown[-1]["content"]) - len(context.messages[-1]["content"]) if shown else 0
        return replace(
            context,
            messages=cast("list[Message]", shown),
            dynamic_trailing_blocks=context.dynamic_trailing_blocks + trailing,
        )

    async def _folded(
        self, context: InvokeModelContext, state: dict[str, Any], ledger: _Ledger, sent: list[dict], shown: list[dict]
    ) -> None:
        """Inject into `sent` (the conversation as the service reads it) and fold what it adds into
        `shown` (as the model will see it), noting the new blocks in `ledger`."""
        agent = context.agent
        result = await self._clients.get().inject(
            sent,
            timeout=self._timeout,
            scope=per_call(self._scope, agent),
            stores=per_call(self._stores, agent) or (),
            app_state=state,
            agent={"id": agent.agent_id, "name": agent.name or ""},
            **self._options,
        )
        report = result.report
        tell(self._on_report, report)
        index = report.target_message_index
        if 0 <= index < len(sent):
            added = result.messages[index]["content"][len(sent[index]["content"]) :]
            ledger.note(index, [block["injected"] for block in added])
            shown[index] = {**shown[index], "content": [*shown[index]["content"], *map(_shown, added)]}


def _shown(block: Mapping[str, Any]) -> dict[str, Any]:
    """A block as the model sees it: an injected block is the text it carries."""
    if "injected" in block:
        return {"text": block["injected"]["text"]}
    return dict(block)


class _Ledger:
    """What each ContextInjection of an agent injected, kept in the agent's state (JSON):
    `{plugin name: [{"index": i, "message": fingerprint, "blocks": [injected block]}]}`.

    A record belongs to the message with its fingerprint (the hash of the message as the agent
    holds it, without the text other instances folded in this call), at its index when that still
    matches: a conversation manager that trims the history moves or drops messages, and a record
    whose message is gone is dropped with it (the model no longer sees its entries).
    """

    def __init__(self, entries: Mapping[str, Any], name: str) -> None:
        self.entries = {key: list(records) for key, records in entries.items()}
        self._name = name
        self._mine: list[dict[str, Any]] = self.entries.get(name, [])
        # Each message's fingerprint, as `conversation` found them.
        self._fingerprints: list[str] = []
        # The texts of the blocks other instances fold (those before this one did, in this call).
        self._folded = {
            block["text"] for key, records in self.entries.items() if key != name for record in records
            for block in record["blocks"]
        }  # fmt: skip

    def _own(self, message: Mapping[str, Any]) -> list[Any]:
        return [block for block in message["content"] if block.get("text") not in self._folded]

    def _fingerprint(self, message: Mapping[str, Any]) -> str:
        key = json.dumps([message["role"], self._own(message)], sort_keys=True, default=repr)
        return hashlib.sha256(key.encode()).hexdigest()[:32]

    def conversation(self, messages: Sequence[Mapping[str, Any]]) -> tuple[list[dict], list[dict]]:
        """The conversation as this instance's service call should read it (its own earlier blocks
        as the injected blocks they are; the other instances' left out, so they neither feed the
        query nor count as this instance's), and as the model should (every block as its text)."""
        fingerprints = self._fingerprints = [self._fingerprint(message) for message in messages]
        kept: list[dict[str, Any]] = []
        blocks: dict[int, list[dict[str, Any]]] = {}
        for record in self._mine:
            index = record["index"]
            if not (0 <= index < len(messages) and fingerprints[index] == record["message"]):
                index = next((i for i, print_ in enumerate(fingerprints) if print_ == record["message"]), -1)
            if index >= 0 and index not in blocks:
                blocks[index] = record["blocks"]
                kept.append({**record, "index": index})
        self._mine[:] = kept
        sent: list[dict] = []
        shown: list[dict] = []
        for index, message in enumerate(messages):
            mine = blocks.get(index, [])
            sent.append({**message, "content": [*self._own(message), *({"injected": block} for block in mine)]})
            shown.append({**message, "content": [*message["content"], *({"text": b["text"]} for b in mine)]})
        return sent, shown

    def note(self, index: int, blocks: list[dict[str, Any]]) -> None:
        """Keep the blocks just folded into the message at `index` of the `conversation` read."""
        if not blocks:
            return
        for record in self._mine:
            if record["index"] == index:
                record["blocks"] = [*record["blocks"], *blocks]
                break
        else:
            self._mine.append({"index": index, "message": self._fingerprints[index], "blocks": blocks})
        self.entries[self._name] = self._mine


class ContextfoldMemoryStore:
    """A Strands memory store kept in a contextfold store.

    `store` names the contextfold store; `name` (default: the same) is what the
    agent's tools call it. `scope` ({"user_id", "agent_id", "session_id"}) is
    applied to every search and to every entry added; `filter` (as
    `Client.search_memories` takes it) to every search. Adds are idempotent: an
    entry's id is derived from its store, scope, content and metadata (`entry_id`,
    the same in the TypeScript store), so the at-least-once writes of extraction
    do not store a fact twice.

    With extraction and no extractor of the agent's, Strands hands the conversation
    to `add_messages`: the service's Remember stores the user's turns (never
    injected context), each once, or with `remember_extract` the facts the server's
    extractor finds in them, correcting what is kept.

    Calls go through `client` (an `AsyncClient`, the caller's to close), else one the store
    makes per event loop, with `timeout` (seconds) as its deadline; `close()` closes it.
    """

    def __init__(
        self,
        store: str,
        client: AsyncClient | None = None,
        *,
        target: str | None = None,
        name: str | None = None,
        description: str | None = None,
        scope: Mapping[str, str] | None = None,
        min_score: float | None = None,
        max_search_results: int | None = None,
        writable: bool = True,
        extraction: Any = None,
        filter: Mapping[str, Any] | None = None,
        remember_extract: bool = False,
        conversation_id: str = "",
        timeout: float = 5.0,
    ) -> None:
        self.store = store
        self.name = name or store
        self.description = description
        self.max_search_results = max_search_results
        self.writable = writable
        self.extraction = extraction
        self._clients = LoopClients(client, target, timeout)
        self._scope = dict(scope or {})
        self._min_score = min_score
        self._filter = dict(filter) if filter else None
        self._remember_extract = remember_extract
        self._conversation_id = conversation_id
        self._timeout = timeout

    async def search(self, query: str, options: SearchOptions | None = None) -> list[MemoryEntry]:
        limit = (options or {}).get("max_search_results") or self.max_search_results or 0
        results = await self._clients.get().search_memories(
            query,
            stores=[self.store],
            max_results=limit,
            scope=self._scope or None,
            min_score=self._min_score,
            filter=self._filter,
        )
        return [_entry(result.memory, result.score) for result in results]

    async def add_messages(self, messages: Sequence[Mapping[str, Any]], context: Any = None) -> int:
        """Remember the conversation's turns (server-side extraction): how many memories were added
        or updated. Turns remembered before are skipped, so a retried batch stores nothing twice."""
        done = await self._clients.get().remember(
            self.store,
            list(messages),
            scope=self._scope or None,
            conversation_id=self._conversation_id,
            extract=self._remember_extract,
        )
        return len(done.memories)

    async def add(self, content: str, metadata: dict[str, Any] | None = None) -> str:
        memory: dict[str, Any] = {"id": self.entry_id(content, metadata), "content": content, **self._scope}
        if metadata:
            memory["metadata"] = metadata
        (added,) = await self._clients.get().add_memories(self.store, [memory])
        return added.id

    async def close(self) -> None:
        """Close the client this store made (a client passed in is the caller's to close)."""
        await self._clients.close()

    def entry_id(self, content: str, metadata: Mapping[str, Any] | None = None) -> str:
        """The id `add` gives this entry: the same in the TypeScript store, so both share entries."""
        scope = {field: value for field, value in self._scope.items() if value}
        key = json.dumps(
            [self.store, scope, content, metadata or {}], sort_keys=True, ensure_ascii=False, separators=(",", ":")
        )
        return "strands-" + hashlib.sha256(key.encode()).hexdigest()[:32]


def _entry(memory: Any, score: float) -> MemoryEntry:
    metadata = json_format.MessageToDict(memory.metadata) if memory.HasField("metadata") else {}
    return MemoryEntry(content=memory.content, metadata={**metadata, "id": memory.id, "score": score})
