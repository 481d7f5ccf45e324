"""contextfold for LangChain and LangGraph agents: injection before each model call.

    from langchain.agents import create_agent
    from contextfold.langchain import ContextfoldMiddleware

    agent = create_agent(model, tools, middleware=[ContextfoldMiddleware(stores=["prefs"])])

`ContextfoldMiddleware` is a `create_agent` middleware (`wrap_model_call`): before each model
call it sends the conversation to `Inject` and hands the model the folded messages, the block
in the latest user message (the last `HumanMessage`, not a tool result), through
`request.override(messages=…)`: the graph's `messages` stay as the user and the tools wrote
them. `pre_model_hook(...)` does the same for LangGraph's `create_react_agent`
(`llm_input_messages`).

- **One search a user turn.** What was injected is kept in the graph's state (key
  `contextfold`: the blocks folded into each user message, by message id). The steps of a
  tool loop that follow find the latest user message already asked for and show its block
  again, without a call: a ten-step tool loop costs one search.
- **Across turns.** Every block kept is shown again with its message on every later call
  (the model's view of the past does not change, so its cacheable prefix holds) and sent to
  the service as the `InjectedBlock` it was, so a later turn brings new entries only. With a
  checkpointer, this holds across invocations of a thread.
- **Fails open.** The service down or slower than `timeout` (0.2 s by default) leaves the
  model's input as the framework built it, blocks kept before shown as they were; one warning
  until a call goes through again.

Install with `pip install 'contextfold[langchain]'`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NotRequired, TypeVar

from langchain.agents import AgentState
from langchain.agents.middleware import AgentMiddleware, ExtendedModelResponse, ModelRequest, ModelResponse
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage, ToolMessage
from langgraph.types import Command

from ._adapters import FailingOpen, LoopClients, ReportListener, added_blocks, checked, per_call
from ._requests import InjectSettings, ScopeLike
from .client import AsyncClient, Client, InjectResult

if TYPE_CHECKING:
    from typing_extensions import Unpack

logger = logging.getLogger(__name__)

# The state key under which what was injected is kept: {instance name: {message key: [injected block]}}.
STATE_KEY = "contextfold"
Kept = dict[str, dict[str, list[dict[str, Any]]]]
_Message = TypeVar("_Message", bound=BaseMessage)


class ContextfoldState(AgentState[Any]):
    """The agent's state with what contextfold injected (`STATE_KEY`), for the graph to keep."""

    contextfold: NotRequired[Kept]


def contextfold_messages(messages: Sequence[BaseMessage]) -> list[tuple[int, dict[str, Any]]]:
    """LangChain messages as contextfold reads a conversation (`{"role", "content": [blocks]}`), each
    with its index among `messages`: human text as text blocks, an AI message's tool calls as
    `toolUse` blocks, a tool's answer as a user message holding a `toolResult` (so the latest user
    message is the last human one). System messages are left out; parts that are not text (an
    image, say) travel as they are."""
    converted = []
    for index, message in enumerate(messages):
        if isinstance(message, HumanMessage):
            converted.append((index, {"role": "user", "content": _blocks(message.content)}))
        elif isinstance(message, AIMessage):
            uses = [
                {"toolUse": {"toolUseId": call["id"] or "", "name": call["name"], "input": call["args"]}}
                for call in message.tool_calls
            ]
            text = [block for block in _blocks(message.content) if block.get("text") != ""]
            converted.append((index, {"role": "assistant", "content": [*text, *uses] or [{"text": ""}]}))
        elif isinstance(message, ToolMessage):
            result = {
                "toolUseId": message.tool_call_id,
                "content": _blocks(message.content),
                "status": "error" if message.status == "error" else "success",
            }
            converted.append((index, {"role": "user", "content": [{"toolResult": result}]}))
    return converted


def _blocks(content: str | list[Any]) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"text": content}]
    blocks: list[dict[str, Any]] = []
    for part in content:
        if isinstance(part, str):
            blocks.append({"text": part})
        elif isinstance(part, dict) and part.get("type") == "text":
            blocks.append({"text": part.get("text", "")})
        else:
            blocks.append(dict(part) if isinstance(part, dict) else {"text": str(part)})
    return blocks


def _key(message: BaseMessage) -> str:
    """What a message's kept blocks are filed under: its id (the graph gives each one), else its content."""
    if message.id:
        return message.id
    text = json.dumps(message.content, sort_keys=True, default=repr)
    return "content:" + hashlib.sha256(text.encode()).hexdigest()[:32]


def _with_text(message: _Message, texts: Sequence[str]) -> _Message:
    """`message` (a copy) with `texts` after its content: appended to a string, or as text parts."""
    if not texts:
        return message
    if isinstance(message.content, str):
        content: str | list[Any] = message.content + "".join(texts)
    else:
        content = [*message.content, *({"type": "text", "text": text} for text in texts)]
    return message.model_copy(update={"content": content})


@dataclass
class _Fold:
    """One model call's conversation: as the service reads it (`sent`, kept blocks as `InjectedBlock`s),
    as the model will see it (`shown`), where the latest user message is, and what is kept."""

    sent: list[dict[str, Any]]
    positions: list[int]
    shown: list[AnyMessage]
    kept: dict[str, list[dict[str, Any]]]
    target: int | None
    asked: bool = False
    changed: bool = False


class _Injection:
    """What the middleware and the hook share: the settings, the clients, and folding."""

    def __init__(
        self,
        name: str,
        target: str | None,
        client: Client | None,
        async_client: AsyncClient | None,
        timeout: float,
        on_report: ReportListener | None,
        scope: ScopeLike | Callable[[Any], ScopeLike],
        stores: Sequence[str] | Callable[[Any], Sequence[str] | None],
        options: InjectSettings,
        adapter: str,
    ) -> None:
        checked(options, adapter)
        self.name = name
        self._target = target
        self._client = client
        self._async_clients = LoopClients(async_client, target, timeout)
        self._made_lock = threading.Lock()
        self._timeout = timeout
        self._on_report = on_report
        self._scope = scope
        self._stores = stores
        self._options = options
        self._failing_open = FailingOpen(logger, "the model sees the conversation as it was").attempt

    def sync_client(self) -> Client:
        with self._made_lock:
            if self._client is None:
                self._client = Client(self._target, timeout=self._timeout)
            return self._client

    def prepare(self, messages: Sequence[AnyMessage], state: Mapping[str, Any]) -> _Fold:
        """The conversation with the blocks kept for it shown again, and whether its latest user message
        still needs a search (not when a step of the same turn asked already: a tool loop)."""
        kept = dict((state.get(STATE_KEY) or {}).get(self.name, {}))
        converted = contextfold_messages(messages)
        shown = list(messages)
        sent = []
        for index, message in converted:
            blocks = kept.get(_key(messages[index]), [])
            sent.append({**message, "content": [*message["content"], *({"injected": b} for b in blocks)]})
            shown[index] = _with_text(messages[index], [block["text"] for block in blocks])
        humans = [i for i, message in enumerate(messages) if isinstance(message, HumanMessage)]
        target = humans[-1] if humans else None
        fold = _Fold(sent, [index for index, _ in converted], shown, kept, target)
        fold.asked = target is None or _key(messages[target]) in kept
        return fold

    def settle(self, fold: _Fold, messages: Sequence[AnyMessage], result: InjectResult) -> None:
        """Fold what the call added into the message it targets, and keep it (an empty list: asked)."""
        assert fold.target is not None
        added = added_blocks(result, fold.sent, fold.positions, fold.target, self._on_report)
        key = _key(messages[fold.target])
        fold.kept[key] = [*fold.kept.get(key, []), *added]
        fold.shown[fold.target] = _with_text(fold.shown[fold.target], [block["text"] for block in added])
        fold.changed = True

    def call_options(self, context: Any) -> dict[str, Any]:
        stores = per_call(self._stores, context) or ()
        return {**self._options, "timeout": self._timeout, "scope": per_call(self._scope, context), "stores": stores}

    def fold(self, messages: Sequence[AnyMessage], state: Mapping[str, Any], context: Any) -> _Fold | None:
        """The model call's conversation, folded (`prepare`, then `Inject` unless the turn asked already);
        None when it cannot be read, and the model gets the messages as they were."""
        fold = None
        with self._failing_open():
            fold = self.prepare(messages, state)
            if not fold.asked:
                self.settle(fold, messages, self.sync_client().inject(fold.sent, **self.call_options(context)))
        return fold

    async def afold(self, messages: Sequence[AnyMessage], state: Mapping[str, Any], context: Any) -> _Fold | None:
        fold = None
        with self._failing_open():
            fold = self.prepare(messages, state)
            if not fold.asked:
                result = await self._async_clients.get().inject(fold.sent, **self.call_options(context))
                self.settle(fold, messages, result)
        return fold

    def update(self, fold: _Fold, state: Mapping[str, Any]) -> dict[str, Any]:
        """The state update keeping what was injected (every instance's, this one's changed)."""
        return {STATE_KEY: {**(state.get(STATE_KEY) or {}), self.name: fold.kept}}

    def close(self) -> None:
        if self._client is not None:
            self._client.close()

    async def aclose(self) -> None:
        self.close()
        await self._async_clients.close()


class ContextfoldMiddleware(AgentMiddleware[ContextfoldState, Any, Any]):
    """Memory injection for `langchain.agents.create_agent`, before each model call.

    `options` are `Client.inject`'s settings (`InjectSettings`: trigger, max_entries, query,
    min_score, format, ranking, filter, providers, max_tokens, …). `scope` and `stores` are values,
    or functions of the call's `Runtime` (`lambda runtime: {"user_id": runtime.context.user_id}`
    with a `context_schema`), so one agent serves many users. `timeout` (seconds, 0.2 by default)
    bounds each call; `on_report` receives each call's `InjectionReport`. The clients are made
    from `target` (else `CONTEXTFOLD_ADDRESS`, else localhost:50051) unless given (`client` for
    `invoke`, `async_client` for `ainvoke`); `close()` closes those it made. `name` tells
    instances apart in the state.
    """

    state_schema = ContextfoldState

    def __init__(
        self,
        *,
        name: str = "contextfold",
        target: str | None = None,
        client: Client | None = None,
        async_client: AsyncClient | None = None,
        timeout: float = 0.2,
        on_report: ReportListener | None = None,
        scope: ScopeLike | Callable[[Any], ScopeLike] = None,
        stores: Sequence[str] | Callable[[Any], Sequence[str] | None] = (),
        **options: Unpack[InjectSettings],
    ) -> None:
        super().__init__()
        self._injection = _Injection(
            name, target, client, async_client, timeout, on_report, scope, stores, options, "ContextfoldMiddleware"
        )

    @property
    def name(self) -> str:
        return self._injection.name

    def wrap_model_call(
        self, request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], ModelResponse[Any]]
    ) -> ModelResponse[Any] | AIMessage | ExtendedModelResponse[Any]:
        fold = self._injection.fold(request.messages, request.state, request.runtime)
        return self._answer(fold, request, handler(_asking(request, fold)))

    async def awrap_model_call(
        self, request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]]
    ) -> ModelResponse[Any] | AIMessage | ExtendedModelResponse[Any]:
        fold = await self._injection.afold(request.messages, request.state, request.runtime)
        return self._answer(fold, request, await handler(_asking(request, fold)))

    def _answer(
        self, fold: _Fold | None, request: ModelRequest[Any], response: ModelResponse[Any]
    ) -> ModelResponse[Any] | ExtendedModelResponse[Any]:
        if fold is None or not fold.changed:
            return response
        update = self._injection.update(fold, request.state)
        return ExtendedModelResponse(model_response=response, command=Command(update=update))

    def close(self) -> None:
        """Close the synchronous client this middleware made (one passed in is the caller's)."""
        self._injection.close()

    async def aclose(self) -> None:
        """Close the clients this middleware made, for this event loop too."""
        await self._injection.aclose()


def _asking(request: ModelRequest[Any], fold: _Fold | None) -> ModelRequest[Any]:
    """The request the model gets: with the folded messages, or as it was."""
    return request if fold is None else request.override(messages=fold.shown)


def pre_model_hook(
    *,
    name: str = "contextfold",
    target: str | None = None,
    client: Client | None = None,
    timeout: float = 0.2,
    on_report: ReportListener | None = None,
    scope: ScopeLike | Callable[[Any], ScopeLike] = None,
    stores: Sequence[str] | Callable[[Any], Sequence[str] | None] = (),
    **options: Unpack[InjectSettings],
) -> Callable[[Mapping[str, Any]], dict[str, Any]]:
    """A `pre_model_hook` for LangGraph's `create_react_agent`, injecting as `ContextfoldMiddleware` does:
    the model gets the folded messages (`llm_input_messages`), the graph's `messages` stay as they
    were. Pass `state_schema=ContextfoldReactState` (or a schema of yours with its `contextfold` key)
    so what was injected is kept: without it, each step of a tool loop searches again. `scope` and
    `stores` may be functions of the graph's state. `hook.close()` closes the client it made."""
    injection = _Injection(name, target, client, None, timeout, on_report, scope, stores, options, "pre_model_hook")

    def hook(state: Mapping[str, Any]) -> dict[str, Any]:
        messages = list(state["messages"])
        fold = injection.fold(messages, state, state)
        if fold is None:
            return {"llm_input_messages": messages}
        answer: dict[str, Any] = {"llm_input_messages": fold.shown}
        # A key the graph's state does not declare is dropped by LangGraph: kept only with the schema.
        return answer | injection.update(fold, state) if fold.changed else answer

    # The hook's client, made on its first call, is closed by `hook.close()`.
    hook.close = injection.close  # type: ignore[attr-defined]
    return hook


try:  # LangGraph's prebuilt state, for `create_react_agent(state_schema=ContextfoldReactState)`.
    from langgraph.prebuilt.chat_agent_executor import AgentState as _ReactState

    class ContextfoldReactState(_ReactState):
        """`create_react_agent`'s state with what contextfold injected (`STATE_KEY`)."""

        contextfold: NotRequired[Kept]

except ImportError:  # pragma: no cover - langgraph without its prebuilt agents
    pass
