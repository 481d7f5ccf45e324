"""Facts from a conversation, by an OpenAI-compatible chat model, as mem0 extracts them.

Two calls: one lists the facts the turns state (`{"facts": [...]}`), one decides for
each fact, against the nearest memories already kept, whether it is new (ADD),
corrects one of them (UPDATE, with the corrected text) or is known already (NONE).
The operator configures the endpoint (`--extractor-url`, `--extractor-model`,
`CONTEXTFOLD_EXTRACTOR_API_KEY`); a Remember call asks for it with `extract`.
Whatever goes wrong is an `ExtractFailed`: Remember stores nothing and says why.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from ..outbound import http_client
from .records import MAX_CONTENT_CHARS, text_fault

FACTS_PROMPT = (
    "You keep an assistant's long-term memory of a user. From the user's messages below, list the"
    " facts worth remembering about the user: preferences, plans, personal details, decisions. One"
    " short sentence each, in the user's language. Leave out greetings, questions and anything"
    ' transient. Answer with JSON only: {"facts": ["...", ...]} (an empty list when there are none).'
)
DECISIONS_PROMPT = (
    "You keep an assistant's long-term memory. Compare each new fact with the memories already kept"
    " (each has an id). For each fact decide: ADD when it is new; UPDATE when it corrects or refines a"
    " kept memory (give that memory's id and the corrected text, which replaces it); NONE when a kept"
    ' memory already says it. Answer with JSON only: {"memory": [{"event": "ADD", "text": "..."},'
    ' {"event": "UPDATE", "id": "...", "text": "..."}, {"event": "NONE", "id": "..."}]}.'
)
MAX_FACTS = 20


class ExtractFailed(Exception):
    """The extractor gave no usable answer; the message says why."""


@dataclass(frozen=True)
class Decision:
    """ADD `text`; UPDATE the kept memory `id` to `text`; or NONE."""

    event: str
    text: str = ""
    id: str = ""


def _storable(text: str, what: str) -> None:
    """An answer's text is an entry's content: what no entry may hold (`records.text_fault`) is the
    model's failure, not the caller's."""
    fault = text_fault(text, MAX_CONTENT_CHARS)
    if fault:
        raise ExtractFailed(f"{what} {fault}")


class Extractor:
    def __init__(self, url: str, model: str, api_key: str = "", timeout: float = 30.0) -> None:
        """`url`: the API's base (e.g. `http://vllm:8000/v1`); chat completions are at `/chat/completions`."""
        self.url = url.rstrip("/") + "/chat/completions"
        self.model = model
        self.timeout = timeout
        self._client = http_client(api_key)

    async def facts(self, turns: Sequence[str]) -> list[str]:
        """The facts the user's turns state, at most `MAX_FACTS`."""
        answer = await self._ask(FACTS_PROMPT, "\n".join(f"- {turn}" for turn in turns))
        facts = answer.get("facts")
        if not isinstance(facts, list) or not all(isinstance(fact, str) for fact in facts):
            raise ExtractFailed('the answer holds no "facts" list of strings')
        kept = [fact.strip() for fact in facts if fact.strip()][:MAX_FACTS]
        for fact in kept:
            _storable(fact, "a fact")
        return kept

    async def decide(self, facts: Sequence[str], kept: dict[str, str]) -> list[Decision]:
        """What to do with each fact, given the memories kept near them (`{id: text}`). An UPDATE or
        NONE must name one of them."""
        prompt = json.dumps({"kept": [{"id": k, "text": v} for k, v in kept.items()], "new_facts": list(facts)})
        answer = await self._ask(DECISIONS_PROMPT, prompt)
        items = answer.get("memory")
        if not isinstance(items, list):
            raise ExtractFailed('the answer holds no "memory" list')
        decisions: list[Decision] = []
        for item in items:
            if not isinstance(item, dict) or item.get("event") not in ("ADD", "UPDATE", "NONE"):
                raise ExtractFailed("a decision is not an object with an event ADD, UPDATE or NONE")
            event, text, memory_id = item["event"], item.get("text", ""), item.get("id", "")
            text = text.strip() if isinstance(text, str) else ""
            if event != "NONE":
                if not text:
                    raise ExtractFailed(f"an {event} decision has no text")
                _storable(text, f"an {event} decision's text")
            if event != "ADD" and memory_id not in kept:
                raise ExtractFailed(f"an {event} decision names no kept memory")
            decisions.append(Decision(event, text, memory_id))
        return decisions

    async def _ask(self, system: str, user: str) -> dict[str, Any]:
        body = {
            "model": self.model,
            "temperature": 0,
            "response_format": {"type": "json_object"},
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
        }
        try:
            response = await self._client.post(self.url, json=body, timeout=self.timeout)
        except httpx.TimeoutException:
            raise ExtractFailed(f"no answer within {self.timeout:.0f} s") from None
        except httpx.HTTPError as error:
            raise ExtractFailed(f"unreachable: {type(error).__name__}") from None
        if response.status_code != 200:
            raise ExtractFailed(f"HTTP status {response.status_code}")
        try:
            content = response.json()["choices"][0]["message"]["content"]
            answer = json.loads(content)
        except (ValueError, KeyError, IndexError, TypeError):
            raise ExtractFailed("the answer is not a chat completion holding JSON") from None
        if not isinstance(answer, dict):
            raise ExtractFailed("the answer's JSON is not an object")
        return answer

    async def close(self) -> None:
        await self._client.aclose()
