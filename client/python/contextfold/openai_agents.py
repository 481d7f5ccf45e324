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

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from agents.run_config import CallModelData, ModelInputData

from ._adapters import Dialect, Remembering, ReportListener
from ._requests import InjectSettings, ScopeLike
from .client import AsyncClient

if TYPE_CHECKING:
    from typing_extensions import Unpack

logger = logging.getLogger(__name__)


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
        self._injection = Remembering(
            _DIALECT, "ContextfoldInputFilter", client, target, timeout, on_report, scope, stores, remembered,
            options, logger,
        )  # fmt: skip

    async def __call__(self, data: CallModelData[Any]) -> ModelInputData:
        folded = await self._injection.fold(list(data.model_data.input), data.context)
        return ModelInputData(input=folded, instructions=data.model_data.instructions)

    async def close(self) -> None:
        """Close the clients this filter made (one passed in is the caller's)."""
        await self._injection.close()


def _asks(message: Mapping[str, Any], item: Any) -> bool:
    """Whether a converted message is a user's ask (text), not a tool's output."""
    return message["role"] == "user" and not any("toolResult" in block for block in message["content"])


_DIALECT: Dialect[Any] = Dialect(
    contextfold_messages,
    _asks,
    _with_text,
    lambda item: json.dumps(item, sort_keys=True, default=repr).encode(),
)
