"""contextfold for pydantic-ai agents: injection as a capability, before each model request.

    from pydantic_ai import Agent
    from contextfold.pydantic_ai import ContextfoldCapability

    agent = Agent(model, capabilities=[ContextfoldCapability(stores=["prefs"])])

`ContextfoldCapability` implements `before_model_request`: before each model request it sends
the messages to `Inject` (user prompts as text, tool calls as `toolUse`, tool returns as
`toolResult`) and gives the model the messages with the block after the latest user prompt's
text. It changes only the request's messages, never the run's history (`RunContext.messages`),
so nothing is kept twice and the history stays as the user and the tools wrote it.

- **One search a user turn, new entries only across turns.** What was injected is remembered
  by the capability for each user prompt, under the hash of the scope and of the messages up to
  and including it: the later requests of a tool loop show the block again without a call; a
  later run given the earlier messages (`message_history=result.all_messages()`) shows their
  blocks again and sends them back as the `InjectedBlock`s they were, so it brings new entries
  only (the newest `remembered` prompts, 10,000 by default, in the capability's process).
- **Fails open.** The service down or slower than `timeout` (0.2 s by default): the request goes
  as the agent built it, blocks remembered shown as they were, one warning until a call goes
  through again.

Install with `pip install 'contextfold[pydantic-ai]'`.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import ModelRequestContext
from pydantic_ai.tools import RunContext

from ._adapters import Dialect, Remembering, ReportListener
from ._requests import InjectSettings, ScopeLike
from .client import AsyncClient

if TYPE_CHECKING:
    from typing_extensions import Unpack

logger = logging.getLogger(__name__)


def contextfold_messages(messages: Sequence[ModelMessage]) -> list[tuple[int, dict[str, Any]]]:
    """pydantic-ai's messages as contextfold reads a conversation, each with its index: a request's user
    prompts as text and its tool returns (and retry prompts) as `toolResult`s, a response's text and
    tool calls (`toolUse`). System prompts, and parts of other kinds, are left out."""
    converted = []
    for index, message in enumerate(messages):
        content: list[dict[str, Any]] = []
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, UserPromptPart):
                    content += _texts(part.content)
                elif isinstance(part, ToolReturnPart | RetryPromptPart):
                    said = part.model_response_str() if isinstance(part, ToolReturnPart) else part.model_response()
                    result = {"toolUseId": part.tool_call_id, "content": [{"text": said}], "status": "success"}
                    content.append({"toolResult": result})
            if content:
                converted.append((index, {"role": "user", "content": content}))
        elif isinstance(message, ModelResponse):
            for said_part in message.parts:
                if isinstance(said_part, TextPart):
                    content.append({"text": said_part.content})
                elif isinstance(said_part, ToolCallPart):
                    call = said_part
                    use = {"toolUseId": call.tool_call_id, "name": call.tool_name, "input": call.args_as_dict()}
                    content.append({"toolUse": use})
            if content:
                converted.append((index, {"role": "assistant", "content": content}))
    return converted


def _texts(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"text": content}]
    return [{"text": item} for item in content if isinstance(item, str)] or [{"text": ""}]


def _asks(converted: Mapping[str, Any], message: ModelMessage) -> bool:
    """Whether a message is a person's ask: a request holding a user prompt (not only tool returns)."""
    return isinstance(message, ModelRequest) and any(isinstance(part, UserPromptPart) for part in message.parts)


def _with_text(message: ModelRequest, texts: Sequence[str]) -> ModelRequest:
    """A request (a copy) with `texts` after its last user prompt's content."""
    if not texts:
        return message
    parts = list(message.parts)
    last = max(index for index, part in enumerate(parts) if isinstance(part, UserPromptPart))
    prompt = parts[last]
    assert isinstance(prompt, UserPromptPart)
    added = "".join(texts)
    content = prompt.content + added if isinstance(prompt.content, str) else [*prompt.content, added]
    parts[last] = dataclasses.replace(prompt, content=content)
    return dataclasses.replace(message, parts=parts)


class ContextfoldCapability(AbstractCapability[Any]):
    """contextfold's injection for a pydantic-ai `Agent`, before each model request.

    `options` are `Client.inject`'s settings (`InjectSettings`). `scope` and `stores` are values, or
    functions of the run's dependencies (`ctx.deps`: `scope=lambda deps: {"user_id": deps.user_id}`),
    so one agent serves many users. `timeout` (seconds, 0.2 by default) bounds each call; `on_report`
    receives each call's report. The client (one per event loop) comes from `target`, else
    `CONTEXTFOLD_ADDRESS`, else localhost:50051, unless one is given; `close()` closes those it made.
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
            _DIALECT, "ContextfoldCapability", client, target, timeout, on_report, scope, stores, remembered,
            options, logger,
        )  # fmt: skip

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        # The request's messages only: the run's history (`ctx.messages`) stays as it was.
        request_context.messages = await self._injection.fold(request_context.messages, ctx.deps)
        return request_context

    async def close(self) -> None:
        """Close the clients this capability made (one passed in is the caller's)."""
        await self._injection.close()


def _shown_with(message: ModelMessage, texts: Sequence[str]) -> ModelMessage:
    return _with_text(message, texts) if isinstance(message, ModelRequest) else message


_DIALECT: Dialect[ModelMessage] = Dialect(
    contextfold_messages,
    _asks,
    _shown_with,
    lambda message: ModelMessagesTypeAdapter.dump_json([message]),
)
