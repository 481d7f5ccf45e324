"""Concurrent embedding requests share model calls, in turns per tenant, and recent texts are not
embedded twice.

Dynamic micro-batching: while the model embeds one batch, the texts that arrive wait together and
go in as the next batch; under no load a text goes in at once, so batching never adds a wait. A
batch is filled in turns, one text of each waiting tenant after another (round robin), so a tenant
adding thousands of texts makes its own calls wait, never another tenant's query: a query's one
text goes in the next batch whatever is queued. A tenant may have at most `max_queued_per_tenant`
texts waiting (past that, RESOURCE_EXHAUSTED, retry); a text whose every caller gave up (a cancelled
call, a deadline passed) leaves the queue rather than cost the model a slot. A bounded LRU cache
keeps recent texts' vectors: a text always has the same vector, so a hit is never stale (it caches
the query's embedding, never a search result). Vectors are kept as 32-bit floats, as pgvector
stores and compares them (and the local model computes them): a full cache of 384-dimension vectors
holds 6 MB, not the 50 MB the same vectors take as Python floats.
"""

from __future__ import annotations

import asyncio
from array import array
from collections import Counter, OrderedDict
from collections.abc import Callable

from ..errors import ResourceExhausted
from . import Embedder

# How soon a tenant whose queue is full may try again: a batch takes tens of milliseconds.
RETRY_AFTER = 0.1
# A batch's time grows with its texts, and a query waits for the batch running when it comes: batches
# of 16 keep 95 % of the model's rate at 64 (measured on the local model, two threads: 423 against 444
# texts/s) in a quarter of the time (38 against 144 ms). While several tenants wait, 8.
SHARED_BATCH = 8


class _Waiting:
    """A text waiting for the model: the future its callers await, how many still do, and whose queue
    it waits in."""

    def __init__(self, text: str, tenant: str, future: asyncio.Future[list[float]]) -> None:
        self.text = text
        self.tenant = tenant
        self.future = future
        self.callers = 0


class BatchingEmbedder:
    def __init__(
        self,
        inner: Embedder,
        max_batch: int = 16,
        cache_size: int = 4096,
        max_queued_per_tenant: int = 2048,
        embedded: Callable[[str, str, int], None] = lambda tenant, kind, texts: None,
    ) -> None:
        self.name = inner.name
        self.dimension = inner.dimension
        self._inner = inner
        self._max_batch = max_batch
        self._cache_size = cache_size
        self._max_queued = max_queued_per_tenant
        # Told, after each batch, how many texts the model embedded for each tenant (its usage).
        self._embedded = embedded
        self._cache: OrderedDict[str, array[float]] = OrderedDict()
        # Each tenant's texts waiting for a batch, first come first; the tenants in the order they are served.
        self._queues: OrderedDict[str, OrderedDict[str, _Waiting]] = OrderedDict()
        # Every text waiting or in a batch, whoever asked: a text asked for twice is embedded once.
        self._pending: dict[str, _Waiting] = {}
        self._worker: asyncio.Task | None = None
        self.model_calls = 0
        self.texts_embedded = 0
        self.cache_hits = 0

    async def warm(self) -> None:
        """Run the model once on a query and once on a small batch (its first runs allocate what later ones
        reuse), for no tenant: nothing is counted or cached."""
        await self._inner.embed(["What did we decide about the launch last week?"])
        await self._inner.embed([f"A note, number {n}, about the plan." for n in range(8)])

    async def embed(self, texts: list[str], tenant: str = "") -> list[list[float]]:
        """The texts' vectors, in order, the texts not cached waiting for `tenant`'s turns in the batches."""
        new = [text for text in dict.fromkeys(texts) if text not in self._cache and text not in self._pending]
        queue = self._queues.get(tenant)
        if new and len(queue or ()) + len(new) > self._max_queued:
            raise ResourceExhausted(
                "EMBEDDING_QUEUE_FULL",
                f"this namespace has {len(queue or ())} texts waiting for the model, and may have"
                f" {self._max_queued}: retry with backoff",
                subject=f"namespace:{tenant}",
                retry_after=RETRY_AFTER,
            )
        loop = asyncio.get_running_loop()
        awaited: list[asyncio.Future[list[float]]] = []
        mine: list[_Waiting] = []
        for text in texts:
            cached = self._cache.get(text)
            if cached is not None:
                self._cache.move_to_end(text)
                self.cache_hits += 1
                future: asyncio.Future[list[float]] = loop.create_future()
                future.set_result(cached.tolist())
                awaited.append(future)
                continue
            waiting = self._pending.get(text)
            if waiting is None:
                waiting = self._pending[text] = _Waiting(text, tenant, loop.create_future())
                self._queues.setdefault(tenant, OrderedDict())[text] = waiting
            waiting.callers += 1
            mine.append(waiting)
            awaited.append(waiting.future)
        if self._queues and (self._worker is None or self._worker.done()):
            self._worker = asyncio.create_task(self._drain(), name="embed-batches")
        try:
            # Shielded: one caller giving up does not cancel a vector another caller awaits.
            return list(await asyncio.gather(*(asyncio.shield(future) for future in awaited)))
        finally:
            for waiting in mine:
                waiting.callers -= 1
                if not waiting.callers and not waiting.future.done():
                    self._give_up(waiting)

    def _give_up(self, waiting: _Waiting) -> None:
        """A text nobody waits for any more: out of its queue, if no batch took it yet."""
        queue = self._queues.get(waiting.tenant)
        if queue is None or queue.get(waiting.text) is not waiting:
            return
        del queue[waiting.text]
        del self._pending[waiting.text]
        waiting.future.cancel()
        if not queue:
            del self._queues[waiting.tenant]

    def _next_batch(self) -> dict[str, _Waiting]:
        """Up to `max_batch` texts, one of each waiting tenant's in turn; while several tenants wait, a
        smaller batch (`SHARED_BATCH`), so none waits long behind a batch filled with another's texts."""
        batch: dict[str, _Waiting] = {}
        size = self._max_batch if len(self._queues) < 2 else min(self._max_batch, SHARED_BATCH)
        while self._queues and len(batch) < size:
            tenant, queue = next(iter(self._queues.items()))
            text, waiting = queue.popitem(last=False)
            batch[text] = waiting
            if queue:
                self._queues.move_to_end(tenant)
            else:
                del self._queues[tenant]
        return batch

    async def _drain(self) -> None:
        while self._queues:
            batch = self._next_batch()
            try:
                self.model_calls += 1
                self.texts_embedded += len(batch)
                vectors = await self._inner.embed(list(batch))
            except Exception as error:  # noqa: BLE001 - every caller in the batch hears of it
                for text, waiting in batch.items():
                    self._pending.pop(text, None)
                    if not waiting.future.done():
                        waiting.future.set_exception(error)
                continue
            for tenant, texts in Counter(waiting.tenant for waiting in batch.values()).items():
                self._embedded(tenant, "texts_embedded", texts)
            for (text, waiting), vector in zip(batch.items(), vectors, strict=True):
                self._remember(text, vector)
                self._pending.pop(text, None)
                if not waiting.future.done():
                    waiting.future.set_result(vector)

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
