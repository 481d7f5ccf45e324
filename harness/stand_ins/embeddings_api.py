"""A stand-in for a third-party OpenAI-compatible `/v1/embeddings` endpoint, on loopback.

Vectors are bags of hashed words, so texts sharing words are similar: enough
to check that contextfold sends, orders and uses what the endpoint returns.
"""

from __future__ import annotations

import hashlib
import json
import re

from harness.stand_ins.loopback_http import Answer, LoopbackHTTP, json_answer

DIMENSION = 16


def embed(text: str) -> list[float]:
    vector = [0.0] * DIMENSION
    for word in re.findall(r"[a-z]+", text.lower()):
        vector[int(hashlib.sha256(word.encode()).hexdigest(), 16) % DIMENSION] += 1.0
    return vector if any(vector) else [1.0] + [0.0] * (DIMENSION - 1)


class FakeEmbeddingsAPI:
    def __init__(self) -> None:
        self.requests: list[dict] = []
        self.failing = False
        self._http = LoopbackHTTP(self._answer)
        self.base_url = f"{self._http.origin}/v1"

    def _answer(self, path: str, authorization: str | None, data: bytes) -> Answer:
        body = json.loads(data)
        self.requests.append({"path": path, "auth": authorization, "body": body})
        if self.failing or path != "/v1/embeddings":
            return 503 if self.failing else 404, "text/plain", b""
        # Reversed on purpose: clients must order by `index`.
        vectors = [{"object": "embedding", "index": i, "embedding": embed(t)} for i, t in enumerate(body["input"])]
        return json_answer(200, {"object": "list", "data": vectors[::-1], "model": body["model"]})

    def close(self) -> None:
        self._http.close()
