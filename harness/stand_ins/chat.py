"""A stand-in for a third-party OpenAI-compatible chat endpoint on loopback, scripted as an extractor.

`POST /v1/chat/completions` answers the two questions Remember asks, by rule so a
test knows what to expect:
- the facts: each sentence of the user's turns that holds "I" or "my" ("Hi!" is no fact);
- the decisions: a fact whose first three words begin a kept memory UPDATEs it, a fact
  equal to a kept memory is NONE, any other is ADD.
`mode = "error"` answers HTTP 500; `mode = "garbage"` a completion that holds no JSON; `mode = "nul"`
facts holding a NUL; `mode = "long"` facts of 20,000 characters; `mode = "nul_decision"` good facts,
and decisions whose text holds a NUL.
"""

from __future__ import annotations

import json
import re
from typing import Any

from harness.stand_ins.loopback_http import Answer, LoopbackHTTP, json_answer


def facts(text: str) -> list[str]:
    sentences = [s.strip() for s in re.split(r"(?<=[.!?])\s+|\n", text) if s.strip()]
    return [s.lstrip("- ").strip() for s in sentences if re.search(r"\b(I|my|My)\b", s)]


def decisions(kept: list[dict[str, str]], new_facts: list[str]) -> list[dict[str, str]]:
    decided = []
    for fact in new_facts:
        same = next((k for k in kept if k["text"] == fact), None)
        similar = next((k for k in kept if k["text"].split()[:3] == fact.split()[:3]), None)
        if same is not None:
            decided.append({"event": "NONE", "id": same["id"]})
        elif similar is not None:
            decided.append({"event": "UPDATE", "id": similar["id"], "text": fact})
        else:
            decided.append({"event": "ADD", "text": fact})
    return decided


class FakeChat:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.mode = "ok"
        self._http = LoopbackHTTP(self._answer)
        self.base_url = f"{self._http.origin}/v1"

    def _answer(self, path: str, authorization: str | None, data: bytes) -> Answer:
        body = json.loads(data)
        self.requests.append({"path": path, "auth": authorization, "body": body})
        if path != "/v1/chat/completions":
            return json_answer(404, {"error": "not found"})
        if self.mode == "error":
            return json_answer(500, {"error": "model crashed"})
        system, user = body["messages"][0]["content"], body["messages"][1]["content"]
        if '"facts"' in system:
            said = facts(user)
            if self.mode == "nul":
                said = [f"{fact}\x00" for fact in said]
            elif self.mode == "long":
                said = [(fact + " ") * (20_000 // (len(fact) + 1) + 1) for fact in said]
            answer: Any = {"facts": said}
        else:
            asked = json.loads(user)
            decided = decisions(asked["kept"], asked["new_facts"])
            if self.mode == "nul_decision":
                decided = [d | {"text": d["text"] + "\x00"} if "text" in d else d for d in decided]
            answer = {"memory": decided}
        content = "no JSON here" if self.mode == "garbage" else json.dumps(answer)
        return json_answer(200, {"choices": [{"index": 0, "message": {"role": "assistant", "content": content}}]})

    def close(self) -> None:
        self._http.close()
