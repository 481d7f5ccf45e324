"""contextfold for Google ADK agents: injection as a plugin, memory as a `BaseMemoryService`.

    from google.adk.runners import Runner
    from contextfold.adk import ContextfoldMemoryService, ContextfoldPlugin

    runner = Runner(
        agent=agent, app_name="travel", session_service=sessions,
        plugins=[ContextfoldPlugin(stores=["prefs"])],
        memory_service=ContextfoldMemoryService("travel-memory"),
    )

`ContextfoldPlugin` implements `before_model_callback`: before each model call of every agent
the runner runs (the steps of a tool loop included) it sends the request's contents to `Inject`
(text; a function call as a `toolUse`, a function response as a `toolResult`, so the latest user
message is the last one a person wrote) and gives the model the contents with the block as a text
part after the latest user message's text. Only the call's `LlmRequest` changes: the session's
events stay as the user and the tools wrote them.

- **Whose memory.** By default the session's user (`{"user_id": callback_context.user_id}`);
  `scope` and `stores` may be values, or functions of the `CallbackContext`.
- **One search a user turn, new entries only across turns.** What was injected is kept in the
  session's state (`contextfold:<plugin name>`, which the session service stores with the session)
  for each user message, under the hash of the scope and of the contents up to and including it:
  the later calls of a tool loop show the block again without a call, and a later turn (whose
  request replays the session), in this process or another, shows the earlier blocks again and
  sends them back as the `InjectedBlock`s they were (the newest `remembered` user messages of a
  session, 10,000 by default).
- **Fails open.** The service down or slower than `timeout` (0.2 s by default): the request goes
  as ADK built it, one warning until a call goes through again.

`ContextfoldMemoryService` keeps ADK's memory in one contextfold store: an app's user is the
scope `{"user_id": user_id, "agent_id": app_name}`; a session's events with text are entries of
that scope (`session_id` the session's id; ids derived from the event's, so adding a session
again adds only its new events); `search_memory` is `SearchMemories` in that scope.

Install with `pip install 'contextfold[adk]'`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from google.adk.agents.callback_context import CallbackContext
from google.adk.events.event import Event
from google.adk.memory.base_memory_service import BaseMemoryService, SearchMemoryResponse
from google.adk.memory.memory_entry import MemoryEntry
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.sessions.session import Session
from google.genai import types
from google.protobuf import json_format

from ._adapters import Dialect, LoopClients, Remembering, ReportListener
from ._requests import InjectSettings, ScopeLike, SearchOptions
from .client import AsyncClient
from .errors import AlreadyExists, NotFound

if TYPE_CHECKING:
    from typing_extensions import Unpack

logger = logging.getLogger(__name__)

# The session state's key (with the plugin's name after it) under which what was injected is kept.
STATE_KEY = "contextfold"


def contextfold_messages(contents: Sequence[types.Content]) -> list[tuple[int, dict[str, Any]]]:
    """ADK's contents as contextfold reads a conversation, each with its index: text parts as text
    (thoughts left out), a function call as an assistant `toolUse`, a function response as a user
    `toolResult`. Parts of other kinds (files, code) are left out."""
    converted = []
    for index, content in enumerate(contents):
        blocks: list[dict[str, Any]] = []
        for part in content.parts or ():
            if part.text is not None and not part.thought:
                blocks.append({"text": part.text})
            elif part.function_call is not None:
                call = part.function_call
                use = {"toolUseId": call.id or call.name or "", "name": call.name or "", "input": call.args or {}}
                blocks.append({"toolUse": use})
            elif part.function_response is not None:
                response = part.function_response
                said = json.dumps(response.response or {}, default=str)
                result = {"toolUseId": response.id or response.name or "", "content": [{"text": said}]}
                blocks.append({"toolResult": {**result, "status": "success"}})
        if blocks:
            converted.append((index, {"role": "assistant" if content.role == "model" else "user", "content": blocks}))
    return converted


def _asks(message: Mapping[str, Any], content: types.Content) -> bool:
    """Whether a converted message is a person's ask: a user's text, not a function's response."""
    blocks = message["content"]
    return content.role == "user" and any("text" in b for b in blocks) and not any("toolResult" in b for b in blocks)


def _with_text(content: types.Content, texts: Sequence[str]) -> types.Content:
    """The content (a copy) with `texts` as text parts after its parts."""
    return content.model_copy(update={"parts": [*(content.parts or ()), *(types.Part(text=text) for text in texts)]})


def _identity(content: types.Content) -> bytes:
    return json.dumps(content.model_dump(mode="json", exclude_none=True), sort_keys=True).encode()


_DIALECT: Dialect[types.Content] = Dialect(contextfold_messages, _asks, _with_text, _identity)


def _session_user(context: CallbackContext) -> ScopeLike:
    return {"user_id": context.user_id}


class ContextfoldPlugin(BasePlugin):
    """A runner plugin folding contextfold's injection into every model call; see the module's docs.

    `options` are `Client.inject`'s settings (`InjectSettings`). `timeout` (seconds, 0.2 by default)
    bounds each call; `on_report` receives each call's report. The client is made from `target`
    (else `CONTEXTFOLD_ADDRESS`, else localhost:50051), one per event loop, unless one is given;
    `await close()` closes those it made.
    """

    def __init__(
        self,
        client: AsyncClient | None = None,
        *,
        name: str = "contextfold",
        target: str | None = None,
        timeout: float = 0.2,
        on_report: ReportListener | None = None,
        scope: ScopeLike | Callable[[CallbackContext], ScopeLike] = _session_user,
        stores: Sequence[str] | Callable[[CallbackContext], Sequence[str] | None] = (),
        remembered: int = 10_000,
        **options: Unpack[InjectSettings],
    ) -> None:
        super().__init__(name)
        self._injection = Remembering(
            _DIALECT, "ContextfoldPlugin", client, target, timeout, on_report, scope, stores, remembered,
            options, logger,
        )  # fmt: skip

    async def before_model_callback(
        self, *, callback_context: CallbackContext, llm_request: LlmRequest
    ) -> LlmResponse | None:
        # What was injected lives in the session's state (the session service keeps it), under the plugin's
        # name: a later turn, in this process or another, sends it back and gets new entries only.
        key = f"{STATE_KEY}:{self.name}"
        kept = dict(callback_context.state.get(key) or {})
        before = dict(kept)
        llm_request.contents = await self._injection.fold(list(llm_request.contents), callback_context, kept)
        if kept != before:
            callback_context.state[key] = kept  # assigned whole: ADK records a key set, not a value changed
        return None

    async def close(self) -> None:
        """Close the clients this plugin made (one passed in is the caller's)."""
        await self._injection.close()


class ContextfoldMemoryService(BaseMemoryService):
    """ADK's memory kept in the contextfold store `store` (made on the first write if it does not
    exist); see the module's docs. `max_results` (10 by default) and `min_score` bound each search;
    `timeout` (seconds, 5 by default) each call. The client is made from `target`, one per event
    loop, unless one is given; `await close()` closes those it made."""

    def __init__(
        self,
        store: str,
        client: AsyncClient | None = None,
        *,
        target: str | None = None,
        timeout: float = 5.0,
        max_results: int = 10,
        min_score: float | None = None,
    ) -> None:
        self.store = store
        self._clients = LoopClients(client, target, timeout)
        self._max_results = max_results
        self._min_score = min_score
        self._made = False

    async def add_session_to_memory(self, session: Session) -> None:
        await self.add_events_to_memory(
            app_name=session.app_name, user_id=session.user_id, events=session.events, session_id=session.id
        )

    async def add_events_to_memory(
        self,
        *,
        app_name: str,
        user_id: str,
        events: Sequence[Event],
        session_id: str | None = None,
        custom_metadata: Mapping[str, object] | None = None,
    ) -> None:
        entries = []
        for event in events:
            text = _text(event.content)
            if not text:
                continue
            metadata = {**(custom_metadata or {}), "author": event.author, "timestamp": event.timestamp}
            entries.append(
                {
                    "id": _entry_id(app_name, user_id, "event", event.id),
                    "content": text,
                    "metadata": metadata,
                    "user_id": user_id,
                    "agent_id": app_name,
                    "session_id": session_id or "",
                }
            )
        await self._add(entries)

    async def add_memory(
        self,
        *,
        app_name: str,
        user_id: str,
        memories: Sequence[MemoryEntry],
        custom_metadata: Mapping[str, object] | None = None,
    ) -> None:
        """Add each memory as an entry of the user's scope: its id is the memory's, or one derived from
        its text (the same text is one entry). The same id with other text is `AlreadyExists`."""
        entries = []
        for memory in memories:
            text = _text(memory.content)
            metadata = {**(custom_metadata or {}), **memory.custom_metadata}
            metadata.update({key: value for key in ("author", "timestamp") if (value := getattr(memory, key))})
            entry_id = memory.id or _entry_id(app_name, user_id, "memory", text)
            scope = {"user_id": user_id, "agent_id": app_name}
            entries.append({"id": entry_id, "content": text, "metadata": metadata, **scope})
        await self._add(entries)

    async def search_memory(self, *, app_name: str, user_id: str, query: str) -> SearchMemoryResponse:
        options: SearchOptions = {"stores": [self.store], "max_results": self._max_results}
        if self._min_score is not None:
            options["min_score"] = self._min_score
        try:
            found = await self._clients.get().search_memories(
                query, scope={"user_id": user_id, "agent_id": app_name}, **options
            )
        except NotFound as missing:
            if self._made or "store" not in str(missing):
                raise
            return SearchMemoryResponse()  # nothing added yet: the store is made on the first write
        memories = []
        for scored in found:
            entry = scored.memory
            metadata = json_format.MessageToDict(entry.metadata)
            author = metadata.pop("author", None)
            timestamp = metadata.pop("timestamp", None)
            written = _iso(timestamp) if timestamp is not None else _iso(entry.create_time.ToDatetime(UTC).timestamp())
            memories.append(
                MemoryEntry(
                    id=entry.id,
                    content=types.Content(role="user", parts=[types.Part(text=entry.content)]),
                    author=author if isinstance(author, str) else None,
                    timestamp=written,
                    custom_metadata={**metadata, "score": scored.score},
                )
            )
        return SearchMemoryResponse(memories=memories)

    async def delete_memory(self, *, app_name: str, user_id: str, memory_id: str | None = None) -> None:
        """Delete one memory by the id `search_memory` gave it (of this user's scope only: another's
        id is `NotFound`)."""
        if memory_id is None:
            return
        entry = await self._clients.get().get_memory(memory_id)
        if entry.user_id != user_id or entry.agent_id != app_name or entry.store != self.store:
            raise NotFound(f"memory {memory_id!r} is not one of user {user_id!r} of app {app_name!r}")
        await self._clients.get().delete_memories([memory_id], etag=entry.etag)

    async def close(self) -> None:
        """Close the clients this service made (one passed in is the caller's)."""
        await self._clients.close()

    async def _add(self, entries: list[dict[str, Any]]) -> None:
        if not entries:
            return
        client = self._clients.get()
        if not self._made:
            with contextlib.suppress(AlreadyExists):
                await client.create_store(self.store)
            self._made = True
        await client.add_memories(self.store, entries)


def _text(content: types.Content | None) -> str:
    if content is None:
        return ""
    return "\n".join(part.text for part in content.parts or () if part.text and not part.thought)


def _entry_id(app_name: str, user_id: str, kind: str, key: str) -> str:
    """An entry's id: the same for the same app, user and event (or text), in any process."""
    digest = hashlib.sha256(json.dumps([app_name, user_id, kind, key]).encode()).hexdigest()
    return f"adk-{digest[:32]}"


def _iso(timestamp: Any) -> str:
    """An event's timestamp (seconds since the epoch) as ISO 8601, as ADK prefers; text as it is."""
    if isinstance(timestamp, int | float):
        return datetime.fromtimestamp(timestamp, UTC).isoformat().replace("+00:00", "Z")
    return str(timestamp)
