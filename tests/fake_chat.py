"""A stand-in for a third-party OpenAI-compatible chat endpoint on loopback, scripted as an extractor.

`POST /v1/chat/completions` answers the two questions Remember asks, by rule so a
test knows what to expect:
- the facts: each sentence of the user's turns that holds "I" or "my" ("Hi!" is no fact);
- the decisions: a fact whose first three words begin a kept memory UPDATEs it, a fact
  equal to a kept memory is NONE, any other is ADD.
`mode = "error"` answers HTTP 500; `mode = "garbage"` a completion that holds no JSON.
"""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


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
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.requests.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
                if self.path != "/v1/chat/completions":
                    self._answer(404, {"error": "not found"})
                    return
                if fake.mode == "error":
                    self._answer(500, {"error": "model crashed"})
                    return
                system, user = body["messages"][0]["content"], body["messages"][1]["content"]
                if '"facts"' in system:
                    answer: Any = {"facts": facts(user)}
                else:
                    asked = json.loads(user)
                    answer = {"memory": decisions(asked["kept"], asked["new_facts"])}
                content = "no JSON here" if fake.mode == "garbage" else json.dumps(answer)
                self._answer(200, {"choices": [{"index": 0, "message": {"role": "assistant", "content": content}}]})

            def _answer(self, status: int, answer: Any) -> None:
                payload = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
