"""A remote reranker over HTTP, in the two shapes the serving stacks speak.

- `tei`: Text Embeddings Inference's `POST /rerank`, `{"query", "texts"}` in and
  `[{"index", "score"}]` out.
- `cohere`: Cohere's `POST /v1/rerank` (or `/v2/rerank`), which Jina's API and vLLM's
  `/rerank` and `/v1/rerank` share: `{"model", "query", "documents", "top_n"}` in,
  `{"results": [{"index", "relevance_score"}]}` out.

The operator configures it (`--reranker-url`, `--reranker-api`, `--reranker-model`,
`CONTEXTFOLD_RERANKER_API_KEY`); a caller picks it per request with `RANKING_RERANK`.
Whatever goes wrong (a timeout, a refused connection, a status, an answer of another
shape) is a `RerankFailed`: the search keeps the order it had and says why.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import httpx

from ..outbound import http_client

RERANKER_APIS = ("tei", "cohere")


class RerankFailed(Exception):
    """The reranker gave no usable answer; the message says why, for the report, and `kind` in a word
    (`timeout`, `unreachable`, `status`, `answer`, `no_text`), for the metrics."""

    def __init__(self, message: str, kind: str = "answer") -> None:
        super().__init__(message)
        self.kind = kind


class Reranker:
    def __init__(self, url: str, api: str = "tei", model: str = "", api_key: str = "", timeout: float = 0.5) -> None:
        """`url`: the endpoint itself (e.g. `http://tei:8080/rerank`). `timeout`: the most one call
        waits, in seconds; a caller's nearer deadline waits less."""
        if api not in RERANKER_APIS:
            raise ValueError(f"reranker api must be one of {', '.join(RERANKER_APIS)}, not {api!r}")
        self.url = url
        self.api = api
        self.model = model
        self.timeout = timeout
        self._client = http_client(api_key)

    def _body(self, query: str, texts: Sequence[str]) -> dict[str, Any]:
        if self.api == "tei":
            return {"query": query, "texts": list(texts), "truncate": True}
        body: dict[str, Any] = {"query": query, "documents": list(texts), "top_n": len(texts)}
        if self.model:
            body["model"] = self.model
        return body

    async def rerank(self, query: str, texts: Sequence[str], timeout: float | None = None) -> dict[int, float]:
        """The reranker's score for each text, by position in `texts` (higher is more relevant);
        within `timeout` seconds when it is nearer than the reranker's own."""
        wait = self.timeout if timeout is None else max(0.0, min(self.timeout, timeout))
        try:
            response = await self._client.post(self.url, json=self._body(query, texts), timeout=wait)
        except httpx.TimeoutException:
            raise RerankFailed(f"no answer within {wait * 1000:.0f} ms", "timeout") from None
        except httpx.HTTPError as error:
            raise RerankFailed(f"unreachable: {type(error).__name__}", "unreachable") from None
        if response.status_code != 200:
            raise RerankFailed(f"HTTP status {response.status_code}", "status")
        try:
            answer = response.json()
        except ValueError:
            raise RerankFailed("the answer is not JSON") from None
        return _scores(answer.get("results") if isinstance(answer, dict) else answer, len(texts))

    async def close(self) -> None:
        await self._client.aclose()


def _scores(items: Any, count: int) -> dict[int, float]:
    """{index: score} from either shape's list of results; `RerankFailed` for anything else."""
    if not isinstance(items, list):
        raise RerankFailed("the answer holds no list of results")
    scores: dict[int, float] = {}
    for item in items:
        if not isinstance(item, dict):
            raise RerankFailed("a result is not an object")
        index, score = item.get("index"), item.get("score", item.get("relevance_score"))
        if type(index) is not int or not 0 <= index < count:
            raise RerankFailed(f"a result's index is not one of the {count} texts sent")
        if isinstance(score, bool) or not isinstance(score, int | float) or not math.isfinite(score):
            raise RerankFailed("a result's score is not a finite number")
        scores[index] = float(score)
    return scores
