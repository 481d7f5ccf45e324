"""A scripted Strands model: it answers from a list and records the exact input of every call, so a
test asserts what the model saw."""

from __future__ import annotations

import copy
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

from strands.models.model import Model

from .messages import unique

Reply = str | dict[str, Any] | Callable[[list[dict], str | None], str]


class ScriptedModel(Model):
    """Answers each call with the next reply (text, a tool call, or a function of the input), recording the input."""

    def __init__(self, replies: list[Reply]) -> None:
        self.replies = list(replies)
        self.inputs: list[list[dict]] = []
        self.system_prompts: list[str | None] = []

    def update_config(self, **model_config: Any) -> None:
        pass

    def get_config(self) -> dict:
        return {}

    async def structured_output(  # type: ignore[override]
        self, output_model: Any, prompt: Any, system_prompt: str | None = None, **kwargs: Any
    ) -> AsyncIterator[dict]:
        raise NotImplementedError("the scripted model gives no structured output")
        yield {}

    async def stream(  # type: ignore[override]
        self, messages: list[dict], tool_specs: Any = None, system_prompt: str | None = None, **kwargs: Any
    ) -> AsyncIterator[dict]:
        self.inputs.append(copy.deepcopy(messages))
        self.system_prompts.append(system_prompt)
        reply = self.replies.pop(0)
        if callable(reply):
            reply = reply(messages, system_prompt)
        yield {"messageStart": {"role": "assistant"}}
        if isinstance(reply, dict):
            if "say" in reply:
                yield {"contentBlockStart": {"start": {}}}
                yield {"contentBlockDelta": {"delta": {"text": reply["say"]}}}
                yield {"contentBlockStop": {}}
            use = {"toolUseId": unique("call"), "name": reply["tool"]}
            yield {"contentBlockStart": {"start": {"toolUse": use}}}
            yield {"contentBlockDelta": {"delta": {"toolUse": {"input": json.dumps(reply["input"])}}}}
            yield {"contentBlockStop": {}}
            yield {"messageStop": {"stopReason": "tool_use"}}
            return
        yield {"contentBlockStart": {"start": {}}}
        yield {"contentBlockDelta": {"delta": {"text": reply}}}
        yield {"contentBlockStop": {}}
        yield {"messageStop": {"stopReason": "end_turn"}}
