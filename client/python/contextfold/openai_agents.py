"""contextfold for the OpenAI Agents SDK (`openai-agents`): injection before each model call.

    from agents import Runner, RunConfig
    from contextfold.openai_agents import ContextfoldInputFilter

    config = RunConfig(call_model_input_filter=ContextfoldInputFilter(stores=["prefs"]))
    result = await Runner.run(agent, "Book me a seat", run_config=config)

`ContextfoldInputFilter` is a `RunConfig.call_model_input_filter`: before each model call it
sends the run's input items to `Inject` (user text, function calls as `toolUse`, their outputs
as `toolResult`) and returns the input with the block after the latest user message's text. The
run's items, and what a `Session` keeps, stay as they were: the SDK hands the filter a copy.

- **One search a user turn.** What was injected is remembered by the filter, for each user
  message, under the hash of the conversation up to and including it (and the scope): the steps
  of a tool loop that follow, which replay the same items, show its block again without a call.
- **Across turns.** A later run replays the earlier items (`result.to_input_list()`, or a
  `Session`): their blocks are shown again and sent back as the `InjectedBlock`s they were, so a
  later turn brings new entries only. What is remembered lives in the filter's process, the
  newest `remembered` user messages (10,000 by default).
- **Fails open.** The service down or slower than `timeout` (0.2 s by default): the model gets
  the input as the SDK built it, blocks remembered shown as they were, one warning until a call
  goes through again.

Install with `pip install 'contextfold[openai-agents]'`.
"""

from __future__ import annotations

import collections
import hashlib
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agents.run_config import CallModelData, ModelInputData

from ._adapters import FailingOpen, LoopClients, ReportListener, checked, tell
from ._requests import InjectSettings, ScopeLike
from .client import AsyncClient

if TYPE_CHECKING:
    from typing_extensions import Unpack

logger = logging.getLogger(__name__)

Blocks = list[dict[str, Any]]


def contextfold_messages(items: Sequence[Any]) -> list[tuple[int, dict[str, Any]]]:
    """The SDK's input items (the Responses API's) as contextfold reads a conversation, each with its
    index among `items`: user and assistant messages' text, a function call as an assistant `toolUse`,
    its output as a user `toolResult`. System and developer messages, and items of other kinds
    (reasoning, say), are left out."""
    converted = []
    for index, item in enumerate(items):
        kind, role = item.get("type", "message"), item.get("role")
        if kind == "message" and role in ("user", "assistant"):
            converted.append((index, {"role": role, "content": _texts(item.get("content", ""))}))
        elif kind == "function_call":
            use = {"toolUseId": item["call_id"], "name": item["name"], "input": _arguments(item.get("arguments"))}
            converted.append((index, {"role": "assistant", "content": [{"toolUse": use}]}))
        elif kind == "function_call_output":
            output = item.get("output", "")
            result = {"toolUseId": item["call_id"], "content": _texts(output), "status": "success"}
            converted.append((index, {"role": "user", "content": [{"toolResult": result}]}))
    return converted


def _texts(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"text": content}]
    blocks = [
        {"text": part.get("text", "")} if part.get("type") in ("input_text", "output_text", "text") else dict(part)
        for part in content
        if isinstance(part, Mapping)
    ]
    return blocks or [{"text": ""}]


def _arguments(arguments: Any) -> Any:
    try:
        return json.loads(arguments) if isinstance(arguments, str) else arguments or {}
    except ValueError:
        return {"arguments": arguments}


def _with_text(item: Mapping[str, Any], texts: Sequence[str]) -> dict[str, Any]:
    """A user item (a copy) with `texts` after its content."""
    if not texts:
        return dict(item)
    content = item.get("content", "")
    if isinstance(content, str):
        return {**item, "content": content + "".join(texts)}
    return {**item, "content": [*content, *({"type": "input_text", "text": text} for text in texts)]}


@dataclass
class _Fold:
    """One model call's input: as the service reads it, where each of those messages is among the items,
    as the model will see it, the key of each user message (by index), the latest, the call's options."""

    sent: list[dict[str, Any]]
    positions: list[int]
    shown: list[Any]
    keys: dict[int, str]
    latest: int | None
    options: dict[str, Any]


class ContextfoldInputFilter:
    """A `RunConfig.call_model_input_filter` folding contextfold's injection into every model call.

    `options` are `Client.inject`'s settings (`InjectSettings`). `scope` and `stores` are values, or
    functions of the run's context (what `Runner.run(..., context=…)` was given), so one agent
    serves many users. `timeout` (seconds, 0.2 by default) bounds each call; `on_report` receives
    each call's report. The client is made from `target` (else `CONTEXTFOLD_ADDRESS`, else
    localhost:50051), one per event loop, unless one is given; `close()` closes those it made.
    """

    def __init__(
        self,
        client: AsyncClient | None = None,
        *,
        target: str | None = None,
        timeout: float = 0.2,
        on_report: ReportListener | None = None,
        scope: ScopeLike | Callable[[Any], ScopeLike] = None,
        stores: Sequence[str] | Callable[[Any], Sequence[str] | None] = (),
        remembered: int = 10_000,
        **options: Unpack[InjectSettings],
    ) -> None:
        checked(options, "ContextfoldInputFilter")
        self._clients = LoopClients(client, target, timeout)
        self._timeout = timeout
        self._on_report = on_report
        self._scope = scope
        self._stores = stores
        self._options = options
        # The blocks folded into each user message, by `_key`: the newest `remembered` of them.
        self._remembered: collections.OrderedDict[str, Blocks] = collections.OrderedDict()
        self._most = remembered
        self._failing_open = FailingOpen(logger, "the model sees the input as it was").attempt

    async def __call__(self, data: CallModelData[Any]) -> ModelInputData:
        folded = items = list(data.model_data.input)
        with self._failing_open():
            fold = self._prepare(items, data.context)
            folded = fold.shown
            if fold.latest is not None and fold.keys[fold.latest] not in self._remembered:
                await self._ask(fold)
        return ModelInputData(input=folded, instructions=data.model_data.instructions)

    def _prepare(self, items: list[Any], context: Any) -> _Fold:
        """The input with the blocks remembered for it shown again (`shown`), as the service reads it
        (`sent`, those blocks as `InjectedBlock`s), and its latest user message."""
        scope = self._scope(context) if callable(self._scope) else self._scope
        stores = self._stores(context) if callable(self._stores) else self._stores
        converted = contextfold_messages(items)
        keys = {index: self._key(items, index, scope) for index, message in converted if _asks(message)}
        shown = list(items)
        sent = []
        for index, message in converted:
            blocks = self._remembered.get(keys.get(index, ""), [])
            sent.append({**message, "content": [*message["content"], *({"injected": b} for b in blocks)]})
            if blocks:
                shown[index] = _with_text(items[index], [block["text"] for block in blocks])
        options = {**self._options, "scope": scope, "stores": stores or (), "timeout": self._timeout}
        positions = [index for index, _ in converted]
        return _Fold(sent, positions, shown, keys, max(keys) if keys else None, options)

    async def _ask(self, fold: _Fold) -> None:
        """Inject into the latest user message, showing and remembering what it adds (nothing: asked)."""
        assert fold.latest is not None
        result = await self._clients.get().inject(fold.sent, **fold.options)
        tell(self._on_report, result.report)
        added: Blocks = []
        position = result.report.target_message_index
        if 0 <= position < len(fold.sent) and fold.positions[position] == fold.latest:
            appended = result.messages[position]["content"][len(fold.sent[position]["content"]) :]
            added = [block["injected"] for block in appended if "injected" in block]
        self._remember(fold.keys[fold.latest], added)
        fold.shown[fold.latest] = _with_text(fold.shown[fold.latest], [block["text"] for block in added])

    def _key(self, items: Sequence[Any], index: int, scope: Any) -> str:
        """A user message's key: the hash of the scope and of the conversation up to and including it, so
        two conversations share a key only where they are the same (and one user's)."""
        text = json.dumps([scope, list(items[: index + 1])], sort_keys=True, default=repr)
        return hashlib.sha256(text.encode()).hexdigest()

    def _remember(self, key: str, blocks: Blocks) -> None:
        self._remembered[key] = blocks
        self._remembered.move_to_end(key)
        while len(self._remembered) > self._most:
            self._remembered.popitem(last=False)

    async def close(self) -> None:
        """Close the clients this filter made (one passed in is the caller's)."""
        await self._clients.close()


def _asks(message: Mapping[str, Any]) -> bool:
    """Whether a converted message is a user's ask (text), not a tool's output."""
    return message["role"] == "user" and not any("toolResult" in block for block in message["content"])
