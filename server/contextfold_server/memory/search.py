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


@dataclass(frozen=True)
class _Found:
    records: list[ScoredRecord]
    # The vector searched with: the caller's, or the query's embedding.
    vector: tuple[float, ...]


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
        found, durations, unsearchable = await self._search(namespace, scope, query)
        if unsearchable:
            name, dimension = unsearchable[0]
            if dimension is None:
                raise NotFound("store", name)
            # A caller's vector of the wrong length is the caller's field at fault;
            # the server's own embedding of the wrong length means the store does not fit.
            field = vector_field if query.vector else "stores"
            raise InvalidArgument.of(field, _dimensions_differ(len(found.vector), name, dimension))
        return found.records, durations

    async def _search(
        self, namespace: str, scope: Scope, query: SearchQuery
    ) -> tuple[_Found, dict[str, float], list[tuple[str, int | None]]]:
        """The search, and the named stores it could not search: each with its dimension, None for one
        that does not exist. The stores are checked from the same round trip as the search itself,
        which searches only the stores of the query's dimension."""
        durations: dict[str, float] = {}
        started = time.perf_counter()
        if not query.vector:
            with span("contextfold.embed", model=self.embedder.name):
                (vector,) = await self.embedder.embed([query.text])
            query = replace(query, vector=tuple(vector))
            durations["embed"] = time.perf_counter() - started
        searching = time.perf_counter()
        with span("contextfold.search", stores=len(query.stores), limit=query.limit):
            known, records = await self.store.search(namespace, scope, query)
        durations["search"] = time.perf_counter() - searching
        unsearchable = [(name, known.get(name)) for name in query.stores if known.get(name) != len(query.vector)]
        return _Found(records, query.vector), durations, unsearchable

    def port(self, namespace: str, scope: Scope) -> MemorySearch:
        """The engine's `MemorySearch` port, bound to one caller's namespace and scope."""

        async def search(query: SearchQuery) -> SearchResult:
            # Ids a conversation claims that no entry could have cannot match anything.
            query = replace(query, exclude_ids=frozenset(filter(is_memory_id, query.exclude_ids)))
            # A store that cannot be searched leaves itself out, not the others.
            found, durations, unsearchable = await self._search(namespace, scope, query)
            results = found.records
            left_out = tuple(
                f"store {name!r} does not exist"
                if dimension is None
                else f"store {name!r} was left out: {_dimensions_differ(len(found.vector), name, dimension)}"
                for name, dimension in unsearchable
            )
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
            return SearchResult(entries=entries, durations=durations, left_out=left_out)

        return search


def _dimensions_differ(query_dimension: int, store: str, store_dimension: int) -> str:
    return f"the query vector has {query_dimension} dimensions; store {store!r} has {store_dimension}"
