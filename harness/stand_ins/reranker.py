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
import time
from typing import Any

from harness.stand_ins.loopback_http import Answer, LoopbackHTTP, json_answer


def overlap(query: str, text: str) -> float:
    words = set(re.findall(r"[a-z0-9]+", query.lower()))
    return float(len(words & set(re.findall(r"[a-z0-9]+", text.lower()))))


class FakeReranker:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.mode = "ok"
        self.delay = 1.0
        self._http = LoopbackHTTP(self._answer)
        self.base_url = self._http.origin

    def _answer(self, path: str, authorization: str | None, data: bytes) -> Answer:
        body = json.loads(data)
        self.requests.append({"path": path, "auth": authorization, "body": body})
        if self.mode == "slow":
            time.sleep(self.delay)
        if self.mode == "error":
            return json_answer(500, {"error": "model crashed"})
        if path == "/rerank":
            texts = body["texts"]
            answer: Any = [{"index": i, "score": overlap(body["query"], t)} for i, t in enumerate(texts)]
            answer.sort(key=lambda item: -item["score"])
        elif path == "/v1/rerank":
            texts = body["documents"]
            results = [{"index": i, "relevance_score": overlap(body["query"], t)} for i, t in enumerate(texts)]
            answer = {"results": sorted(results, key=lambda item: -item["relevance_score"])}
        else:
            return json_answer(404, {"error": "not found"})
        if self.mode == "garbage":
            answer = {"ranking": "best first"}
        elif self.mode == "out_of_range":
            answer = [{"index": len(texts) + 3, "score": 1.0}]
        return json_answer(200, answer)

    def close(self) -> None:
        self._http.close()
