"""`MemoryService`: stores and entries."""

from __future__ import annotations

from dataclasses import replace

import grpc
from contextfold.v1 import memory_pb2, memory_pb2_grpc

from ..embedding import Embedder
from ..engine.memory import SearchQuery
from ..errors import InvalidArgument, NotFound, PermissionDenied
from ..memory.search import MemorySearcher
from ..memory.store import NewMemory, PostgresMemoryStore
from .caller import caller_namespace, confined, deadline_of, key_scope
from .checks import (
    MAX_BATCH,
    check_count,
    check_description,
    check_dimension,
    check_max_results,
    check_memory_id,
    check_min_score,
    check_query,
    check_store_name,
    check_store_names,
    check_vector,
)
from .convert import (
    memory_to_proto,
    new_memories_from_proto,
    ranking_from_proto,
    ranking_to_proto,
    scope_from_proto,
    store_to_proto,
)
from .paging import PageTokens, fitting, page_size
from .status import reports_errors


class MemoryServicer(memory_pb2_grpc.MemoryServiceServicer):
    def __init__(
        self, store: PostgresMemoryStore, embedder: Embedder, searcher: MemorySearcher, page_tokens: PageTokens
    ) -> None:
        self._store = store
        self._page_tokens = page_tokens
        self._embedder = embedder
        self._searcher = searcher

    @reports_errors
    async def CreateStore(
        self, request: memory_pb2.CreateStoreRequest, context: grpc.aio.ServicerContext
    ) -> memory_pb2.CreateStoreResponse:
        store = request.store
        check_store_name(store.name, "store.name")
        check_description(store.description, "store.description")
        dimension = check_dimension(store.dimension or self._embedder.dimension, "store.dimension")
        record = await self._store.create_store(caller_namespace(context), store.name, store.description, dimension)
        return memory_pb2.CreateStoreResponse(store=store_to_proto(record))

    @reports_errors
    async def ListStores(
        self, request: memory_pb2.ListStoresRequest, context: grpc.aio.ServicerContext
    ) -> memory_pb2.ListStoresResponse:
        limit = page_size(request.page_size)
        after = self._page_tokens.decode(request.page_token, lambda after: isinstance(after, str)) or ""
        records = await self._store.list_stores(caller_namespace(context), after, limit + 1, key_scope())
        stores, token = self._page_tokens.page(records, limit, store_to_proto, lambda record: record.name)
        return memory_pb2.ListStoresResponse(stores=stores, next_page_token=token)

    @reports_errors
    async def DeleteStore(
        self, request: memory_pb2.DeleteStoreRequest, context: grpc.aio.ServicerContext
    ) -> memory_pb2.DeleteStoreResponse:
        check_store_name(request.name, "name")
        if key_scope().fields():
            # A store holds every user's entries: a key confined to one scope may not remove them all.
            raise PermissionDenied("SCOPE_BOUND_KEY", "DeleteStore: this key is bound to a scope")
        deleted = await self._store.delete_store(caller_namespace(context), request.name, request.force)
        return memory_pb2.DeleteStoreResponse(deleted_memory_count=deleted)

    @reports_errors
    async def AddMemories(
        self, request: memory_pb2.AddMemoriesRequest, context: grpc.aio.ServicerContext
    ) -> memory_pb2.AddMemoriesResponse:
        check_store_name(request.store, "store")
        if not request.memories:
            raise InvalidArgument.of("memories", "must hold at least one entry")
        check_count(request.memories, MAX_BATCH, "memories", "entries")
        new = [
            replace(memory, scope=confined(memory.scope, f"memories[{index}]"))
            for index, memory in enumerate(new_memories_from_proto(request.memories))
        ]
        stores = await self._store.get_stores(caller_namespace(context), [request.store])
        if request.store not in stores:
            raise NotFound("store", request.store)
        new = await self._with_vectors(new, stores[request.store].dimension)
        records = await self._store.add_memories(caller_namespace(context), request.store, new)
        return memory_pb2.AddMemoriesResponse(memories=[memory_to_proto(r) for r in records])

    async def _with_vectors(self, memories: list[NewMemory], dimension: int) -> list[NewMemory]:
        """The entries with the caller's vectors where given, and the embedder's for the rest, in one batch."""
        to_embed = [index for index, memory in enumerate(memories) if not memory.vector]
        if not to_embed:
            return memories
        if self._embedder.dimension != dimension:
            raise InvalidArgument.of(
                f"memories[{to_embed[0]}].vector",
                f"is required: the store has {dimension} dimensions and the server's embedder"
                f" ({self._embedder.name}) produces {self._embedder.dimension}",
            )
        embedded = await self._embedder.embed([memories[index].content for index in to_embed])
        filled = list(memories)
        for index, vector in zip(to_embed, embedded, strict=True):
            filled[index] = replace(memories[index], vector=vector)
        return filled

    @reports_errors
    async def SearchMemories(
        self, request: memory_pb2.SearchMemoriesRequest, context: grpc.aio.ServicerContext
    ) -> memory_pb2.SearchMemoriesResponse:
        if not request.query.strip() and not request.query_vector:
            raise InvalidArgument.of("query", "must not be blank unless query_vector is given")
        check_query(request.query, "query")
        check_vector(request.query_vector, "query_vector")
        check_store_names(request.stores, "stores")
        check_max_results(request.max_results, "max_results")
        ranking = ranking_from_proto(request.ranking, "ranking")
        self._searcher.check_ranking(ranking, "ranking")
        query = SearchQuery(
            text=request.query,
            vector=tuple(request.query_vector),
            stores=tuple(dict.fromkeys(request.stores)),
            limit=request.max_results or 5,
            min_score=check_min_score(request, "min_score"),
            exclude_ids=frozenset(),
            ranking=ranking,
        )
        found = await self._searcher.search(
            caller_namespace(context),
            confined(scope_from_proto(request.scope, "scope"), "scope"),
            query,
            deadline=deadline_of(context),
        )
        scored = [memory_pb2.ScoredMemory(memory=memory_to_proto(r.memory), score=r.score) for r in found.records]
        # The best results that fit one response: no more than a page may hold.
        return memory_pb2.SearchMemoriesResponse(
            results=scored[: fitting(scored)], ranking=ranking_to_proto(found.ranking)
        )

    @reports_errors
    async def GetMemory(
        self, request: memory_pb2.GetMemoryRequest, context: grpc.aio.ServicerContext
    ) -> memory_pb2.GetMemoryResponse:
        check_memory_id(request.id, "id")
        record = await self._store.get_memory(caller_namespace(context), request.id, key_scope())
        return memory_pb2.GetMemoryResponse(memory=memory_to_proto(record))

    @reports_errors
    async def ListMemories(
        self, request: memory_pb2.ListMemoriesRequest, context: grpc.aio.ServicerContext
    ) -> memory_pb2.ListMemoriesResponse:
        check_store_name(request.store, "store")
        limit = page_size(request.page_size)
        scope = confined(scope_from_proto(request.scope, "scope"), "scope")
        key = (request.store, scope.user_id, scope.agent_id, scope.session_id)
        after = self._page_tokens.decode(request.page_token, lambda after: type(after) is int, *key) or 0
        records = await self._store.list_memories(
            caller_namespace(context), request.store, scope, int(after), limit + 1
        )
        memories, token = self._page_tokens.page(records, limit, memory_to_proto, lambda record: record.seq, *key)
        return memory_pb2.ListMemoriesResponse(memories=memories, next_page_token=token)

    @reports_errors
    async def DeleteMemories(
        self, request: memory_pb2.DeleteMemoriesRequest, context: grpc.aio.ServicerContext
    ) -> memory_pb2.DeleteMemoriesResponse:
        if not request.ids:
            raise InvalidArgument.of("ids", "must name at least one entry")
        check_count(request.ids, MAX_BATCH, "ids", "ids")
        for index, memory_id in enumerate(request.ids):
            check_memory_id(memory_id, f"ids[{index}]")
        deleted = await self._store.delete_memories(
            caller_namespace(context),
            list(dict.fromkeys(request.ids)),
            request.allow_missing,
            key_scope(),
        )
        return memory_pb2.DeleteMemoriesResponse(deleted_count=deleted)
