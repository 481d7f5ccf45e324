"""contextfold for Strands Agents (`strands-agents`): injection as a plugin, memory as a store.

    from strands import Agent
    from contextfold.strands import ContextInjection, ContextfoldMemoryStore

    agent = Agent(
        model=model,
        plugins=[ContextInjection(stores=["prefs"], timeout=0.5)],
        memory_manager={"stores": [ContextfoldMemoryStore("prefs")], "injection": False},
    )

`ContextInjection` calls `Inject` before each model call (the SDK's
`InvokeModelStage.Input` middleware) and hands the model the folded messages,
each injected block shown as the text block it stands for. The fold is
per call: the agent's stored conversation is never changed. Whatever goes wrong
on the way (the service down or slower than `timeout`, a conversation it cannot
send), the model call goes on with the messages it had.

`ContextfoldMemoryStore` is a Strands memory store on contextfold's
`MemoryService`, so the `search_memory` and `add_memory` tools and extraction
use the shared service. Install with `pip install 'contextfold[strands]'`.
"""

from __future__ import annotations

import asyncio
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

from .client import Client, _calls
from .v1 import injection_pb2

if TYPE_CHECKING:
    from strands.memory.types import SearchOptions
    from strands.middleware.stages import InvokeModelContext
    from strands.types.content import Message

logger = logging.getLogger(__name__)

ReportListener = Callable[[injection_pb2.InjectionReport], None]


class ContextInjection(Plugin):
    """Folds contextfold's injection into every model call of the agent it is registered on.

    `options` are `Client.inject`'s: trigger ("user_turn" or "every_turn"), stores,
    max_entries, query, scope, min_score, format, format_template, providers,
    max_tokens, coalesce, and the rest. `timeout` (seconds) bounds each call; past
    it the model sees the conversation as it was. `on_report` receives each
    call's `InjectionReport` (what was injected, or why not).
    """

    name = "contextfold:injection"

    def __init__(
        self,
        client: Client | None = None,
        *,
        target: str | None = None,
        timeout: float = 1.0,
        on_report: ReportListener | None = None,
        **options: Any,
    ) -> None:
        super().__init__()
        _calls.inject([], **options)  # bad options fail here, not on the first turn
        self._client = client or Client(target)
        self._timeout = timeout
        self._on_report = on_report
        self._options = options

    def init_agent(self, agent: Any) -> None:
        agent.add_middleware(InvokeModelStage.Input, self._fold)

    async def _fold(self, context: InvokeModelContext) -> InvokeModelContext:
        agent = context.agent
        try:
            result = await asyncio.to_thread(
                self._client.inject,
                context.messages,
                timeout=self._timeout,
                app_state=agent.state.get(),
                agent={"id": agent.agent_id, "name": agent.name or ""},
                **self._options,
            )
        except Exception as error:  # noqa: BLE001 - fail open: the model call goes on without injection.
            logger.warning("reason=<%s> | contextfold inject failed | model sees the conversation as it was", error)
            return context
        report = result.report
        if self._on_report is not None:
            self._on_report(report)
        index = report.target_message_index
        if not 0 <= index < len(context.messages):
            return context
        folded = list(context.messages)
        original = folded[index]
        added = result.messages[index]["content"][len(original["content"]) :]
        content = [*original["content"], *(_shown(block) for block in added)]
        folded[index] = cast("Message", {**original, "content": content})
        trailing = len(added) if index == len(folded) - 1 else 0
        return replace(context, messages=folded, dynamic_trailing_blocks=context.dynamic_trailing_blocks + trailing)


def _shown(block: Mapping[str, Any]) -> dict[str, Any]:
    """A block as the model sees it: an injected block is the text it carries."""
    if "injected" in block:
        return {"text": block["injected"]["text"]}
    return dict(block)


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
    """

    def __init__(
        self,
        store: str,
        client: Client | None = None,
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
        self._client = client or Client(target)
        self._scope = dict(scope or {})
        self._min_score = min_score
        self._filter = dict(filter) if filter else None
        self._remember_extract = remember_extract
        self._conversation_id = conversation_id
        self._timeout = timeout

    async def search(self, query: str, options: SearchOptions | None = None) -> list[MemoryEntry]:
        limit = (options or {}).get("max_search_results") or self.max_search_results or 0
        results = await asyncio.to_thread(
            self._client.search_memories,
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
        done = await asyncio.to_thread(
            self._client.remember,
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
        (added,) = await asyncio.to_thread(self._client.add_memories, self.store, [memory])
        return added.id

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
