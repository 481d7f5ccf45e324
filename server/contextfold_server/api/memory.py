"""`MemoryService`: stores and entries."""

from __future__ import annotations

import json
from typing import Any

import grpc
from contextfold.v1 import memory_pb2, memory_pb2_grpc

from ..embedding import Embedder
from ..errors import FieldViolation, InvalidArgument, NotFound
from ..memory.search import MemorySearcher
from ..memory.store import NewMemory, PostgresMemoryStore, Scope
from .caller import caller_namespace
from .convert import (
    check_memory_id,
    check_min_score,
    check_store_name,
    check_store_names,
    check_vector,
    decode_page_token,
    encode_page_token,
    memory_to_proto,
    page_size,
    scope_from_proto,
    store_to_proto,
    struct_to_dict,
)
from .status import reports_errors

MAX_BATCH = 1000
# An entry is a fact to recall, not a document: 16 KiB of text (the model reads the first 256 tokens).
MAX_CONTENT_CHARS = 16_384
MAX_SEARCH_RESULTS = 100


class MemoryServicer(memory_pb2_grpc.MemoryServiceServicer):
    def __init__(self, store: PostgresMemoryStore, embedder: Embedder, searcher: MemorySearcher) -> None:
        self._store = store
        self._embedder = embedder
        self._searcher = searcher

    @reports_errors
    async def CreateStore(self, request: memory_pb2.CreateStoreRequest, context: grpc.aio.ServicerContext):
        store = request.store
        check_store_name(store.name, "store.name")
        dimension = store.dimension or self._embedder.dimension
        if not 1 <= dimension <= 2000:
            raise InvalidArgument.of("store.dimension", f"must be from 1 to 2000 (the HNSW limit), got {dimension}")
        record = await self._store.create_store(caller_namespace(context), store.name, store.description, dimension)
        return memory_pb2.CreateStoreResponse(store=store_to_proto(record))

    @reports_errors
    async def ListStores(self, request: memory_pb2.ListStoresRequest, context: grpc.aio.ServicerContext):
        limit = page_size(request.page_size)
        after = decode_page_token(request.page_token, lambda after: isinstance(after, str)) or ""
        records = await self._store.list_stores(caller_namespace(context), after, limit + 1)
        response = memory_pb2.ListStoresResponse(stores=[store_to_proto(r) for r in records[:limit]])
        if len(records) > limit:
            response.next_page_token = encode_page_token(records[limit - 1].name)
        return response

    @reports_errors
    async def DeleteStore(self, request: memory_pb2.DeleteStoreRequest, context: grpc.aio.ServicerContext):
        check_store_name(request.name, "name")
        deleted = await self._store.delete_store(caller_namespace(context), request.name, request.force)
        return memory_pb2.DeleteStoreResponse(deleted_memory_count=deleted)

    @reports_errors
    async def AddMemories(self, request: memory_pb2.AddMemoriesRequest, context: grpc.aio.ServicerContext):
        check_store_name(request.store, "store")
        if not request.memories:
            raise InvalidArgument.of("memories", "must hold at least one entry")
        if len(request.memories) > MAX_BATCH:
            raise InvalidArgument.of("memories", f"holds {len(request.memories)} entries; the limit is {MAX_BATCH}")
        checked = self._check_new_memories(request.memories)
        stores = await self._store.get_stores(caller_namespace(context), [request.store])
        if request.store not in stores:
            raise NotFound("store", request.store)
        vectors = await self._vectors_for(request.memories, stores[request.store].dimension)
        new = [
            NewMemory(
                content=memory.content,
                vector=vector,
                id=memory.id,
                metadata=metadata,
                scope=scope,
            )
            for memory, vector, (metadata, scope) in zip(request.memories, vectors, checked, strict=True)
        ]
        records = await self._store.add_memories(caller_namespace(context), request.store, new)
        return memory_pb2.AddMemoriesResponse(memories=[memory_to_proto(r) for r in records])

    @staticmethod
    def _check_new_memories(memories) -> list[tuple[dict[str, Any], Scope]]:
        """Each entry's metadata and scope, once every entry has been checked."""
        violations: list[FieldViolation] = []
        checked: list[tuple[dict[str, Any], Scope]] = []
        seen: dict[str, int] = {}
        for index, memory in enumerate(memories):
            if not memory.content.strip():
                violations.append(FieldViolation(f"memories[{index}].content", "must not be blank"))
            elif "\x00" in memory.content:
                violations.append(FieldViolation(f"memories[{index}].content", "must not contain NUL characters"))
            elif len(memory.content) > MAX_CONTENT_CHARS:
                violations.append(
                    FieldViolation(
                        f"memories[{index}].content",
                        f"holds {len(memory.content)} characters; the limit is {MAX_CONTENT_CHARS}",
                    )
                )
            metadata = struct_to_dict(memory.metadata)
            if "\\u0000" in json.dumps(metadata):
                violations.append(FieldViolation(f"memories[{index}].metadata", "must not contain NUL characters"))
            try:
                checked.append((metadata, scope_from_proto(memory, f"memories[{index}]")))
            except InvalidArgument as error:
                violations.extend(error.violations)
            if memory.id:
                try:
                    check_memory_id(memory.id, f"memories[{index}].id")
                except InvalidArgument as error:
                    violations.extend(error.violations)
                if memory.id in seen:
                    violations.append(
                        FieldViolation(f"memories[{index}].id", f"repeats the id of memories[{seen[memory.id]}]")
                    )
                seen.setdefault(memory.id, index)
            try:
                check_vector(memory.vector, f"memories[{index}].vector")
            except InvalidArgument as error:
                violations.extend(error.violations)
        if violations:
            raise InvalidArgument(*violations)
        return checked

    async def _vectors_for(self, memories, dimension: int) -> list[list[float]]:
        """The caller's vectors where given; the embedder's for the rest, in one batch."""
        to_embed = [index for index, memory in enumerate(memories) if not memory.vector]
        if to_embed and self._embedder.dimension != dimension:
            raise InvalidArgument.of(
                f"memories[{to_embed[0]}].vector",
                f"is required: the store has {dimension} dimensions and the server's embedder"
                f" ({self._embedder.name}) produces {self._embedder.dimension}",
            )
        vectors = [list(memory.vector) for memory in memories]
        if to_embed:
            embedded = await self._embedder.embed([memories[index].content for index in to_embed])
            for index, vector in zip(to_embed, embedded, strict=True):
                vectors[index] = vector
        return vectors

    @reports_errors
    async def SearchMemories(self, request: memory_pb2.SearchMemoriesRequest, context: grpc.aio.ServicerContext):
        if not request.query.strip() and not request.query_vector:
            raise InvalidArgument.of("query", "must not be blank unless query_vector is given")
        check_vector(request.query_vector, "query_vector")
        check_store_names(request.stores, "stores")
        if not 0 <= request.max_results <= MAX_SEARCH_RESULTS:
            raise InvalidArgument.of("max_results", f"must be from 0 to {MAX_SEARCH_RESULTS}")
        results, _ = await self._searcher.search(
            caller_namespace(context),
            text=request.query,
            vector=request.query_vector,
            stores=list(dict.fromkeys(request.stores)),
            scope=scope_from_proto(request.scope, "scope"),
            limit=request.max_results or 5,
            min_score=check_min_score(request, "min_score"),
        )
        return memory_pb2.SearchMemoriesResponse(
            results=[memory_pb2.ScoredMemory(memory=memory_to_proto(r.memory), score=r.score) for r in results]
        )

    @reports_errors
    async def GetMemory(self, request: memory_pb2.GetMemoryRequest, context: grpc.aio.ServicerContext):
        check_memory_id(request.id, "id")
        record = await self._store.get_memory(caller_namespace(context), request.id)
        return memory_pb2.GetMemoryResponse(memory=memory_to_proto(record))

    @reports_errors
    async def ListMemories(self, request: memory_pb2.ListMemoriesRequest, context: grpc.aio.ServicerContext):
        check_store_name(request.store, "store")
        limit = page_size(request.page_size)
        scope = scope_from_proto(request.scope, "scope")
        key = (request.store, scope.user_id, scope.agent_id, scope.session_id)
        after = decode_page_token(request.page_token, lambda after: type(after) is int, *key) or 0
        records = await self._store.list_memories(
            caller_namespace(context), request.store, scope, int(after), limit + 1
        )
        response = memory_pb2.ListMemoriesResponse(memories=[memory_to_proto(r) for r in records[:limit]])
        if len(records) > limit:
            response.next_page_token = encode_page_token(records[limit - 1].seq, *key)
        return response

    @reports_errors
    async def DeleteMemories(self, request: memory_pb2.DeleteMemoriesRequest, context: grpc.aio.ServicerContext):
        if not request.ids:
            raise InvalidArgument.of("ids", "must name at least one entry")
        if len(request.ids) > MAX_BATCH:
            raise InvalidArgument.of("ids", f"names {len(request.ids)} entries; at most {MAX_BATCH}")
        for index, memory_id in enumerate(request.ids):
            check_memory_id(memory_id, f"ids[{index}]")
        deleted = await self._store.delete_memories(
            caller_namespace(context), list(dict.fromkeys(request.ids)), request.allow_missing
        )
        return memory_pb2.DeleteMemoriesResponse(deleted_count=deleted)
