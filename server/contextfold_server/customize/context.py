"""The engine's `Customizer` for one request: what its expressions see, run in the sandbox.

What an expression sees is the request itself (the conversation, the app state, the
agent) as JSON, built once per request and only when an expression asks. The messages'
JSON is the client package's (`contextfold.convert`, which the server depends on for the
generated stubs too): an expression sees a conversation exactly as a Python, TypeScript or
Go client writes it, by the one converter that defines that shape. For a
large request, building and encoding it runs on a thread, not on the event loop:
the interpreter then lets the loop run every few milliseconds in between.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

from contextfold.convert import dumps, from_proto_messages
from contextfold.v1 import injection_pb2
from google.protobuf import json_format

from ..engine.conversation import Role, Turn, is_user_turn, latest_index, text_of
from ..engine.entries import RetrievedEntry
from ..engine.gate import Skipped, SkipReason
from ..engine.outcome import SourceFailed
from ..turns import InTurns
from .sandbox import Sandbox, SandboxError, SandboxTimeout, encode_with_json

# Past this many bytes, a request's context is encoded on a thread.
_ENCODE_ON_THE_LOOP = 64 * 1024


class RequestCustomizer:
    def __init__(
        self,
        sandbox: Sandbox,
        request: injection_pb2.InjectRequest,
        turns: Sequence[Turn],
        tenant: str,
        deadline: float | None,
    ) -> None:
        self._sandbox = sandbox
        self._request = request
        self._turns = turns
        self._tenant = tenant
        # When the caller's time runs out (the event loop's clock), or None.
        self._deadline = deadline
        self._context: asyncio.Future[str] | None = None

    def _context_json(self) -> str:
        turns = self._turns

        def latest_text(role: Role) -> str:
            index = latest_index(turns, role)
            return text_of(turns[index]) if index >= 0 else ""

        # Image and document bytes travel as {"$bytes": "<base64>"}, as everywhere in the messages' JSON.
        return dumps(
            {
                "messages": from_proto_messages(self._request.messages),
                "app_state": json_format.MessageToDict(self._request.app_state),
                "agent": {"id": self._request.agent.id, "name": self._request.agent.name},
                "is_user_turn": is_user_turn(turns),
                "latest_user_text": latest_text(Role.USER),
                "latest_assistant_text": latest_text(Role.ASSISTANT),
                "message_count": len(turns),
            }
        )

    async def _run(self, kind: str, what: str, source: str, data_json: str) -> Any:
        within = None if self._deadline is None else self._deadline - asyncio.get_running_loop().time()
        try:
            return await self._sandbox.run_encoded(encode_with_json(kind, source, data_json), self._tenant, within)
        except SandboxTimeout as timeout:
            raise Skipped(SkipReason.TIMEOUT, f"{what}: {timeout}") from None
        except SandboxError as error:
            raise SourceFailed(f"{what} failed: {error}") from None

    async def _request_context(self) -> str:
        """The request's context, encoded once, on the first expression: most calls have none."""
        if self._context is None:
            if self._request.ByteSize() > _ENCODE_ON_THE_LOOP:
                self._context = asyncio.ensure_future(InTurns(self._tenant)(self._context_json))
            else:
                self._context = asyncio.get_running_loop().create_future()
                self._context.set_result(self._context_json())
        return await self._context

    async def trigger(self, expression: str) -> bool:
        return await self._run("trigger", "the trigger expression", expression, await self._request_context())

    async def query(self, expression: str) -> str:
        return await self._run("query", "the query expression", expression, await self._request_context())

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
        large = sum(len(entry.content) for entry in entries) > _ENCODE_ON_THE_LOOP
        data_json = await InTurns(self._tenant)(json.dumps, data) if large else json.dumps(data)
        return await self._run("format", "the format template", template, data_json)
