"""A stand-in for a third-party reranker on loopback, in both shapes contextfold speaks.

`POST /rerank` answers as Text Embeddings Inference does (`[{"index", "score"}]`);
`POST /v1/rerank` as Cohere, Jina and vLLM do (`{"results": [{"index",
"relevance_score"}]}`). A text scores the number of the query's words it holds, so
a test knows the order to expect. `mode` makes it misbehave: `slow` (answers after
`delay` seconds), `error` (HTTP 500), `garbage` (an answer of no known shape),
`out_of_range` (an index past the texts sent).
"""

from __future__ import annotations

import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def overlap(query: str, text: str) -> float:
    words = set(re.findall(r"[a-z0-9]+", query.lower()))
    return float(len(words & set(re.findall(r"[a-z0-9]+", text.lower()))))


class FakeReranker:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.mode = "ok"
        self.delay = 1.0
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.requests.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
                if fake.mode == "slow":
                    time.sleep(fake.delay)
                if fake.mode == "error":
                    self._answer(500, {"error": "model crashed"})
                    return
                if self.path == "/rerank":
                    texts = body["texts"]
                    answer: Any = [{"index": i, "score": overlap(body["query"], t)} for i, t in enumerate(texts)]
                    answer.sort(key=lambda item: -item["score"])
                elif self.path == "/v1/rerank":
                    texts = body["documents"]
                    results = [{"index": i, "relevance_score": overlap(body["query"], t)} for i, t in enumerate(texts)]
                    answer = {"results": sorted(results, key=lambda item: -item["relevance_score"])}
                else:
                    self._answer(404, {"error": "not found"})
                    return
                if fake.mode == "garbage":
                    answer = {"ranking": "best first"}
                elif fake.mode == "out_of_range":
                    answer = [{"index": len(texts) + 3, "score": 1.0}]
                self._answer(200, answer)

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
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
