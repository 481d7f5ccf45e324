"""Search by meaning: embed the query (unless the caller did), then one ranked query across stores."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

from ..embedding import Embedder
from ..engine.entries import RetrievedEntry
from ..engine.memory import MemorySearch, SearchQuery, SearchResult
from ..errors import InvalidArgument, NotFound
from ..observe.tracing import span
from .store import PostgresMemoryStore, Scope, ScoredRecord, is_memory_id


@dataclass
class MemorySearcher:
    store: PostgresMemoryStore
    embedder: Embedder

    async def search(
        self, namespace: str, scope: Scope, query: SearchQuery, vector_field: str = "query_vector"
    ) -> tuple[list[ScoredRecord], dict[str, float]]:
        """Entries most similar to the query across the stores, with the time spent embedding and searching.

        Named stores must exist and match the query's dimension; with no stores
        named, every store of the query's dimension is searched.
        """
        durations: dict[str, float] = {}
        started = time.perf_counter()
        # A caller's vector of the wrong length is the caller's field at fault;
        # the server's own embedding of the wrong length means the store does not fit.
        mismatch_field = vector_field if query.vector else "stores"
        if not query.vector:
            with span("contextfold.embed", model=self.embedder.name):
                (vector,) = await self.embedder.embed([query.text])
            query = replace(query, vector=tuple(vector))
            durations["embed"] = time.perf_counter() - started
        searching = time.perf_counter()
        with span("contextfold.search", stores=len(query.stores), limit=query.limit):
            # The stores are checked from the same round trip as the search; on a bad name the
            # search was wasted, which only a failing call pays for.
            known, results = await self.store.search(namespace, scope, query)
        durations["search"] = time.perf_counter() - searching
        for name in query.stores:
            if name not in known:
                raise NotFound("store", name)
            if known[name] != len(query.vector):
                raise InvalidArgument.of(
                    mismatch_field,
                    f"the query vector has {len(query.vector)} dimensions; store {name!r} has {known[name]}",
                )
        return results, durations

    def port(self, namespace: str, scope: Scope) -> MemorySearch:
        """The engine's `MemorySearch` port, bound to one caller's namespace and scope."""

        async def search(query: SearchQuery) -> SearchResult:
            # Ids a conversation claims that no entry could have cannot match anything.
            query = replace(query, exclude_ids=frozenset(filter(is_memory_id, query.exclude_ids)))
            results, durations = await self.search(namespace, scope, query, vector_field="memory.query_vector")
            entries = [
                RetrievedEntry(
                    id=r.memory.id,
                    store=r.memory.store,
                    content=r.memory.content,
                    score=r.score,
                    metadata=r.memory.metadata,
                    created_at=r.memory.create_time,
                )
                for r in results
            ]
            return SearchResult(entries=entries, durations=durations)

        return search
