"""Concurrent embedding requests share model calls, and recent texts are not embedded twice.

Dynamic micro-batching: while the model embeds one batch, the texts that arrive
wait together and go in as the next batch; under no load a text goes in at once,
so batching never adds a wait. A bounded LRU cache keeps recent texts' vectors:
a text always has the same vector, so a hit is never stale (it caches the query's
embedding, never a search result). Vectors are kept as 32-bit floats, as pgvector
stores and compares them (and the local model computes them): a full cache of
384-dimension vectors holds 6 MB, not the 50 MB the same vectors take as Python floats.
"""

from __future__ import annotations

import asyncio
from array import array
from collections import OrderedDict

from . import Embedder


class BatchingEmbedder:
    def __init__(self, inner: Embedder, max_batch: int = 64, cache_size: int = 4096) -> None:
        self.name = inner.name
        self.dimension = inner.dimension
        self._inner = inner
        self._max_batch = max_batch
        self._cache_size = cache_size
        self._cache: OrderedDict[str, array[float]] = OrderedDict()
        self._waiting: dict[str, asyncio.Future[list[float]]] = {}
        self._worker: asyncio.Task | None = None
        self.model_calls = 0
        self.texts_embedded = 0
        self.cache_hits = 0

    async def embed(self, texts: list[str]) -> list[list[float]]:
        loop = asyncio.get_running_loop()
        pending: list[asyncio.Future[list[float]]] = []
        for text in texts:
            cached = self._cache.get(text)
            if cached is not None:
                self._cache.move_to_end(text)
                self.cache_hits += 1
                future: asyncio.Future[list[float]] = loop.create_future()
                future.set_result(cached.tolist())
            else:
                future = self._waiting.get(text) or self._waiting.setdefault(text, loop.create_future())
            pending.append(future)
        if self._waiting and (self._worker is None or self._worker.done()):
            self._worker = asyncio.create_task(self._drain(), name="embed-batches")
        # Shielded: one caller giving up does not cancel a vector another caller awaits.
        return list(await asyncio.gather(*(asyncio.shield(future) for future in pending)))

    async def _drain(self) -> None:
        while self._waiting:
            batch = dict(list(self._waiting.items())[: self._max_batch])
            for text in batch:
                del self._waiting[text]
            try:
                self.model_calls += 1
                self.texts_embedded += len(batch)
                vectors = await self._inner.embed(list(batch))
            except Exception as error:  # noqa: BLE001 - every caller in the batch hears of it
                for future in batch.values():
                    if not future.done():
                        future.set_exception(error)
                continue
            for (text, future), vector in zip(batch.items(), vectors, strict=True):
                self._remember(text, vector)
                if not future.done():
                    future.set_result(vector)

    def counts(self) -> dict[str, int]:
        """Model calls, texts the model embedded (their ratio is the mean batch), and cache hits."""
        return {"model_calls": self.model_calls, "texts": self.texts_embedded, "cache_hits": self.cache_hits}

    def _remember(self, text: str, vector: list[float]) -> None:
        self._cache[text] = array("f", vector)
        self._cache.move_to_end(text)
        while len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)

    async def close(self) -> None:
        if self._worker is not None:
            self._worker.cancel()
            await asyncio.gather(self._worker, return_exceptions=True)
        await self._inner.close()
