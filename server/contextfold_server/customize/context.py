"""The engine's `Customizer` for one request: what its expressions see, run in the sandbox."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from contextfold.convert import from_proto_messages
from contextfold.v1 import injection_pb2
from google.protobuf import json_format

from ..engine.conversation import Role, Turn, is_user_turn, latest_index, text_of
from ..engine.entries import RetrievedEntry
from ..engine.outcome import SourceFailed
from .sandbox import Sandbox, SandboxError


class RequestCustomizer:
    def __init__(self, sandbox: Sandbox, request: injection_pb2.InjectRequest, turns: Sequence[Turn]) -> None:
        self._sandbox = sandbox
        self._request = request
        self._turns = turns

    @functools.cached_property
    def _context(self) -> dict[str, Any]:
        """Built once, on the first expression: most calls have none."""
        turns = self._turns

        def latest_text(role: Role) -> str:
            index = latest_index(turns, role)
            return text_of(turns[index]) if index >= 0 else ""

        return {
            "messages": from_proto_messages(self._request.messages),
            "app_state": json_format.MessageToDict(self._request.app_state),
            "agent": {"id": self._request.agent.id, "name": self._request.agent.name},
            "is_user_turn": is_user_turn(turns),
            "latest_user_text": latest_text(Role.USER),
            "latest_assistant_text": latest_text(Role.ASSISTANT),
            "message_count": len(turns),
        }

    async def _run(self, kind: str, what: str, source: str, data: dict[str, Any]) -> Any:
        try:
            return await self._sandbox.run(kind, source, data)
        except SandboxError as error:
            raise SourceFailed(f"{what} failed: {error}") from None

    async def trigger(self, expression: str) -> bool:
        return await self._run("trigger", "the trigger expression", expression, self._context)

    async def query(self, expression: str) -> str:
        return await self._run("query", "the query expression", expression, self._context)

    async def render(self, template: str, entries: Sequence[RetrievedEntry]) -> str:
        data = {
            "entries": [
                {
                    "id": entry.id,
                    "store": entry.store,
                    "content": entry.content,
                    "score": entry.score,
                    "metadata": dict(entry.metadata),
                    "created_at": entry.created_at.isoformat() if entry.created_at else "",
                }
                for entry in entries
            ]
        }
        return await self._run("format", "the format template", template, data)
