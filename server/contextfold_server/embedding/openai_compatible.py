"""Any OpenAI-compatible `/embeddings` endpoint: OpenAI, Ollama, vLLM, TEI."""

from __future__ import annotations

import httpx

from ..errors import Unavailable
from ..outbound import http_client


class OpenAICompatibleEmbedder:
    def __init__(self, base_url: str, model: str, api_key: str = "", timeout: float = 10.0) -> None:
        self.name = f"openai:{model}"
        self.dimension = 0
        self.batches_at_once = 1
        self._model = model
        self._client = http_client(api_key, base_url, timeout)

    async def start(self) -> None:
        """Learn the model's dimension from one probe, so stores can record it."""
        (vector,) = await self.embed(["dimension probe"])
        self.dimension = len(vector)

    async def token_counts(self, texts: list[str], tenant: str = "") -> list[int]:
        """An estimate, a token to four characters: an endpoint's batches are not padded, so what a batch
        costs it grows with its texts' length, as the estimate does."""
        return [len(text) // 4 + 1 for text in texts]

    async def embed(self, texts: list[str]) -> list[list[float]]:
        try:
            response = await self._client.post("/embeddings", json={"model": self._model, "input": texts})
            response.raise_for_status()
            data = response.json()["data"]
        except (httpx.HTTPError, KeyError, ValueError) as error:
            raise Unavailable("DEPENDENCY_UNAVAILABLE", f"embedding endpoint failed: {error}") from error
        if len(data) != len(texts):
            raise Unavailable(
                "DEPENDENCY_UNAVAILABLE", f"embedding endpoint returned {len(data)} vectors for {len(texts)} texts"
            )
        # The API may return items in any order; `index` ties each to its input.
        return [item["embedding"] for item in sorted(data, key=lambda item: item["index"])]

    async def close(self) -> None:
        await self._client.aclose()
