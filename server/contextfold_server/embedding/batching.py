"""Concurrent embedding requests share model calls, in turns per tenant, in batches bounded by tokens,
and recent texts are not embedded twice.

Dynamic micro-batching: while the model embeds one batch, the texts that arrive wait together and
go in as the next batch; under no load a text goes in at once, so batching never adds a wait. A
batch is filled in turns, one text of each waiting tenant after another (round robin), so a tenant
adding thousands of texts makes its own calls wait, never another tenant's query.

A batch is bounded by tokens, not by texts: the model pads a batch to its longest text, so its time
grows with its texts times the longest one's tokens, and a batch of sixteen documents of 256 tokens
runs for a second where sixteen questions take fifty milliseconds. Each `Lane` has its budget of
padded tokens (`BatchPolicy`): a text waits at most for the batch running when it comes, and that
batch is short. Texts are batched with others of similar length (each tenant, in its turn, gives
its waiting text nearest in tokens to the batch's first), so padding wastes little. The model's
rate hardly depends on the batch past a few hundred tokens (measured on the local model, two
threads: 256 padded tokens give 90 % of its best texts per second at every length, 512 give 95 %).

A model that runs batches side by side (`Embedder.batches_at_once`: a bulk worker's local model, a
thread each) is given that many at once, each of the texts waiting when it starts.

The query lane (a worker's: what Inject and SearchMemories embed) and the bulk lane (a bulk
worker's: the texts of writes) are separate embedders in separate processes (`api/lanes.py`), so a
query never shares a batch with a write's texts, and the kernel runs the query's batch first.

A tenant may have at most `max_queued_per_tenant` texts waiting (past that, RESOURCE_EXHAUSTED,
retry); a text whose every caller gave up (a cancelled call, a deadline passed) leaves the queue
rather than cost the model a slot. A bounded LRU cache keeps recent texts' vectors: a text always
has the same vector, so a hit is never stale (it caches the query's embedding, never a search
result). Vectors are kept as 32-bit floats, as pgvector stores and compares them (and the local
model computes them): a full cache of 384-dimension vectors holds 6 MB, not the 50 MB the same
vectors take as Python floats.
"""

from __future__ import annotations

import asyncio
import enum
from array import array
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import ResourceExhausted
from . import Embedder

# How soon a tenant whose queue is full may try again: a batch takes tens of milliseconds.
RETRY_AFTER = 0.1
# How far into a tenant's queue its turn looks for the text nearest in length to the batch's first.
_LOOK_AHEAD = 64


@dataclass(frozen=True)
class BatchPolicy:
    """A lane's batches: at most `max_texts` texts and `max_tokens` tokens once padded to the longest (the
    first text goes in whatever its length)."""

    max_tokens: int
    max_texts: int


class Lane(enum.Enum):
    """Whose texts an embedder batches, and how. Queries: a batch of at most 256 padded tokens, sixteen
    questions (about 50 ms of the local model's time on two threads), what a query may wait behind.
    Bulk: at most 512 (two texts of the model's longest, or 32 of 16 tokens: about 100 ms), 95 % of the
    model's best rate, and no write waits long behind another tenant's."""

    QUERIES = BatchPolicy(max_tokens=256, max_texts=16)
    BULK = BatchPolicy(max_tokens=512, max_texts=32)

    @property
    def label(self) -> str:
        return self.name.lower()


class _Waiting:
    """A text waiting for the model: its tokens, the future its callers await, how many still do, and whose
    queue it waits in."""

    def __init__(self, text: str, tokens: int, tenant: str, future: asyncio.Future[list[float]]) -> None:
        self.text = text
        self.tokens = tokens
        self.tenant = tenant
        self.future = future
        self.callers = 0


class BatchingEmbedder:
    def __init__(
        self,
        inner: Embedder,
        lane: Lane = Lane.QUERIES,
        cache_size: int = 4096,
        max_queued_per_tenant: int = 2048,
        embedded: Callable[[str, str, int], None] = lambda tenant, kind, texts: None,
        policy: BatchPolicy | None = None,
    ) -> None:
        self.name = inner.name
        self.dimension = inner.dimension
        self.lane = lane
        self._inner = inner
        self._policy = policy or lane.value
        self._cache_size = cache_size
        self._max_queued = max_queued_per_tenant
        # Told, after each batch, how many texts the model embedded for each tenant (its usage).
        self._embedded = embedded
        self._cache: OrderedDict[str, array[float]] = OrderedDict()
        # Each tenant's texts waiting for a batch, first come first; the tenants in the order they are served.
        self._queues: OrderedDict[str, OrderedDict[str, _Waiting]] = OrderedDict()
        # Every text waiting or in a batch, whoever asked: a text asked for twice is embedded once.
        self._pending: dict[str, _Waiting] = {}
        # The batches the model is running (at most `inner.batches_at_once`).
        self._running: set[asyncio.Task[None]] = set()
        self._closed = False
        self.model_calls = 0
        self.texts_embedded = 0
        self.tokens_embedded = 0
        self.cache_hits = 0

    async def warm(self) -> None:
        """Run the model once on a query and once on a small batch (its first runs allocate what later ones
        reuse), for no tenant: nothing is counted or cached."""
        await self._inner.embed(["What did we decide about the launch last week?"])
        await self._inner.embed([f"A note, number {n}, about the plan." for n in range(8)])

    async def embed(self, texts: list[str], tenant: str = "") -> list[list[float]]:
        """The texts' vectors, in order, the texts not cached waiting for `tenant`'s turns in the batches."""
        uncached = [text for text in dict.fromkeys(texts) if text not in self._cache]
        self._check_room(tenant, uncached)
        tokens: dict[str, int] = {}
        if uncached:
            # What each text costs a batch, counted before it waits (a text another call queued meanwhile is
            # joined, its count unused); the tenant's room looked at again, as other calls may have taken it.
            tokens = dict(zip(uncached, await self._inner.token_counts(uncached, tenant), strict=True))
            self._check_room(tenant, uncached)
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
                waiting = self._pending[text] = _Waiting(text, tokens[text], tenant, loop.create_future())
                self._queues.setdefault(tenant, OrderedDict())[text] = waiting
            waiting.callers += 1
            mine.append(waiting)
            awaited.append(waiting.future)
        if self._queues and len(self._running) < self._inner.batches_at_once:
            # Once this turn of the loop is over: the texts other calls queue in it join the batch.
            loop.call_soon(self._start_batches)
        try:
            # Shielded: one caller giving up does not cancel a vector another caller awaits.
            return list(await asyncio.gather(*(asyncio.shield(future) for future in awaited)))
        finally:
            for waiting in mine:
                waiting.callers -= 1
                if not waiting.callers and not waiting.future.done():
                    self._give_up(waiting)

    def _check_room(self, tenant: str, uncached: list[str]) -> None:
        """RESOURCE_EXHAUSTED when the texts `tenant` would add to its queue take it past its room."""
        queued = len(self._queues.get(tenant) or ())
        new = sum(1 for text in uncached if text not in self._pending)
        if new and queued + new > self._max_queued:
            raise ResourceExhausted(
                "EMBEDDING_QUEUE_FULL",
                f"this namespace has {queued} texts waiting for the model, and may have {self._max_queued}:"
                " retry with backoff",
                subject=f"namespace:{tenant}",
                retry_after=RETRY_AFTER,
            )

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
        """The next batch: the oldest text of the tenant whose turn it is, then, in turns, each waiting
        tenant's text nearest in tokens to that one, while the batch, padded to its longest, stays within
        the lane's tokens and texts. A tenant served goes to the back of the turns."""
        policy = self._policy
        tenant, queue = next(iter(self._queues.items()))
        text, first = queue.popitem(last=False)
        batch = {text: first}
        longest = first.tokens
        self._served(tenant, queue)
        while len(batch) < policy.max_texts:
            added = False
            for tenant in list(self._queues):
                queue = self._queues[tenant]
                nearest = min(
                    (queue[text] for _, text in zip(range(_LOOK_AHEAD), queue, strict=False)),
                    key=lambda waiting: abs(waiting.tokens - first.tokens),
                )
                if max(longest, nearest.tokens) * (len(batch) + 1) > policy.max_tokens:
                    continue
                del queue[nearest.text]
                batch[nearest.text] = nearest
                longest = max(longest, nearest.tokens)
                self._served(tenant, queue)
                added = True
                if len(batch) >= policy.max_texts:
                    break
            if not added:
                break
        return batch

    def _served(self, tenant: str, queue: OrderedDict[str, _Waiting]) -> None:
        if queue:
            self._queues.move_to_end(tenant)
        else:
            del self._queues[tenant]

    def _start_batches(self) -> None:
        """As many batches as the model runs side by side, each of the texts waiting when it starts; each
        one that ends starts the next, of the texts that came meanwhile."""
        while self._queues and len(self._running) < self._inner.batches_at_once and not self._closed:
            running = asyncio.get_running_loop().create_task(
                self._run(self._next_batch()), name=f"embed-{self.lane.label}"
            )
            self._running.add(running)
            running.add_done_callback(self._ended)

    def _ended(self, batch: asyncio.Task[None]) -> None:
        self._running.discard(batch)
        self._start_batches()

    async def _run(self, batch: dict[str, _Waiting]) -> None:
        try:
            self.model_calls += 1
            self.texts_embedded += len(batch)
            self.tokens_embedded += len(batch) * max(waiting.tokens for waiting in batch.values())
            vectors = await self._inner.embed(list(batch))
        except Exception as error:  # noqa: BLE001 - every caller in the batch hears of it
            for text, waiting in batch.items():
                self._pending.pop(text, None)
                if not waiting.future.done():
                    waiting.future.set_exception(error)
            return
        except asyncio.CancelledError:
            # The embedder is closing: its callers are not left waiting.
            for text, waiting in batch.items():
                self._pending.pop(text, None)
                waiting.future.cancel()
            raise
        for tenant, texts in Counter(waiting.tenant for waiting in batch.values()).items():
            self._embedded(tenant, "texts_embedded", texts)
        for (text, waiting), vector in zip(batch.items(), vectors, strict=True):
            self._remember(text, vector)
            self._pending.pop(text, None)
            if not waiting.future.done():
                waiting.future.set_result(vector)

    def counts(self) -> dict[str, int]:
        """Model calls, texts the model embedded (their ratio is the mean batch), the tokens of its batches
        as padded, and cache hits."""
        return {
            "model_calls": self.model_calls,
            "texts": self.texts_embedded,
            "padded_tokens": self.tokens_embedded,
            "cache_hits": self.cache_hits,
        }

    def _remember(self, text: str, vector: list[float]) -> None:
        self._cache[text] = array("f", vector)
        self._cache.move_to_end(text)
        while len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)

    async def close(self) -> None:
        self._closed = True
        running = list(self._running)
        for batch in running:
            batch.cancel()
        await asyncio.gather(*running, return_exceptions=True)
        await self._inner.close()
