"""`MemoryService`: stores and entries."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace

import grpc
from contextfold.v1 import memory_pb2, memory_pb2_grpc

from ..access.policy import key_scope
from ..embedding.batching import BatchingEmbedder
from ..errors import InvalidArgument, NotFound
from ..memory.lifecycle import MemoryLifecycle
from ..memory.records import NewMemory, ScopedIds
from ..memory.remember import Rememberer
from ..memory.search import MemorySearcher
from ..memory.store import PostgresMemoryStore
from ..postgres.consistency import answered_by
from .call import CALL
from .paging import PageTokens, fitting, page_size
from .requests import (
    Capabilities,
    parse_add_memories,
    parse_create_store,
    parse_delete_memories,
    parse_delete_store,
    parse_erase_memories,
    parse_export_memories,
    parse_import_batch,
    parse_list_memories,
    parse_memory_id,
    parse_remember,
    parse_search_memories,
    parse_update_memory,
)
from .responses import memory_to_proto, ranking_to_proto, store_to_proto, version_to_proto

_ACTIONS = {"added": memory_pb2.RememberedMemory.ACTION_ADDED, "updated": memory_pb2.RememberedMemory.ACTION_UPDATED}


class MemoryServicer(memory_pb2_grpc.MemoryServiceServicer):
    def __init__(
        self,
        store: PostgresMemoryStore,
        lifecycle: MemoryLifecycle,
        embedder: BatchingEmbedder,
        searcher: MemorySearcher,
        page_tokens: PageTokens,
        rememberer: Rememberer,
        capabilities: Capabilities,
        ids: ScopedIds,
    ) -> None:
        self._ids = ids
        self._store = store
        self._lifecycle = lifecycle
        self._page_tokens = page_tokens
        self._embedder = embedder
        self._searcher = searcher
        self._rememberer = rememberer
        self._capabilities = capabilities

    async def CreateStore(
        self, request: memory_pb2.CreateStoreRequest, context: grpc.aio.ServicerContext
    ) -> memory_pb2.CreateStoreResponse:
        new = parse_create_store(request, self._capabilities)
        record = await self._store.create_store(
            CALL.get().namespace, new.name, new.description, new.dimension, new.default_ttl
        )
        return memory_pb2.CreateStoreResponse(store=store_to_proto(record))

    async def ListStores(
        self, request: memory_pb2.ListStoresRequest, context: grpc.aio.ServicerContext
    ) -> memory_pb2.ListStoresResponse:
        call = CALL.get()
        limit = page_size(request.page_size)
        after = self._page_tokens.decode(request.page_token, lambda after: isinstance(after, str)) or ""
        records = await self._store.list_stores(call.namespace, after, limit + 1, key_scope(call.caller))
        stores, token = self._page_tokens.page(records, limit, store_to_proto, lambda record: record.name)
        return memory_pb2.ListStoresResponse(stores=stores, next_page_token=token)

    async def DeleteStore(
        self, request: memory_pb2.DeleteStoreRequest, context: grpc.aio.ServicerContext
    ) -> memory_pb2.DeleteStoreResponse:
        name = parse_delete_store(request)
        deleted = await self._store.delete_store(CALL.get().namespace, name, request.force)
        return memory_pb2.DeleteStoreResponse(deleted_memory_count=deleted)

    async def AddMemories(
        self, request: memory_pb2.AddMemoriesRequest, context: grpc.aio.ServicerContext
    ) -> memory_pb2.AddMemoriesResponse:
        call = CALL.get()
        add = parse_add_memories(request, call.caller)
        namespace = call.namespace
        stores = await self._store.get_stores(namespace, [add.store])
        if add.store not in stores:
            raise NotFound("store", add.store)
        new = await self._with_vectors(await self._own_ids(add.memories), stores[add.store].dimension)
        records = await self._store.add_memories(namespace, add.store, new)
        return memory_pb2.AddMemoriesResponse(memories=[memory_to_proto(r) for r in records])

    async def _own_ids(self, memories: list[NewMemory]) -> list[NewMemory]:
        """The entries with the ids they are added under (`_new_ids`)."""
        named = await self._new_ids([memory.id for memory in memories if memory.id])
        return [replace(memory, id=named[memory.id]) if memory.id else memory for memory in memories]

    async def _new_ids(self, ids: list[str]) -> dict[str, str]:
        """The id each of `ids` names a new entry by: itself, unless the caller's key is bound to a scope and
        no entry within it holds the id: then the scope's own (`ScopedIds`), so no answer tells the key of
        another user's ids."""
        call = CALL.get()
        bound = key_scope(call.caller)
        if not bound.fields() or not ids:
            return {memory_id: memory_id for memory_id in ids}
        held = await self._store.held_within(call.namespace, ids, bound)
        return {memory_id: memory_id if memory_id in held else self._ids.own(bound, memory_id) for memory_id in ids}

    async def _with_vectors(
        self, memories: list[NewMemory], dimension: int | dict[int, int], field: str = "memories"
    ) -> list[NewMemory]:
        """The entries with the caller's vectors where given, and the embedder's for the rest, in one batch.
        `dimension`: the store's, or each entry's store's by position."""
        to_embed = [index for index, memory in enumerate(memories) if not memory.vector]
        if not to_embed:
            return memories
        for index in to_embed:
            wanted = dimension if isinstance(dimension, int) else dimension[index]
            if self._embedder.dimension != wanted:
                raise InvalidArgument.of(
                    f"{field}[{index}].vector",
                    f"is required: the store has {wanted} dimensions and the server's embedder"
                    f" ({self._embedder.name}) produces {self._embedder.dimension}",
                )
        embedded = await self._embedder.embed(
            [memories[index].content for index in to_embed], tenant=CALL.get().namespace
        )
        filled = list(memories)
        for index, vector in zip(to_embed, embedded, strict=True):
            filled[index] = replace(memories[index], vector=vector, embedded=True)
        return filled

    async def SearchMemories(
        self, request: memory_pb2.SearchMemoriesRequest, context: grpc.aio.ServicerContext
    ) -> memory_pb2.SearchMemoriesResponse:
        call = CALL.get()
        search = parse_search_memories(request, call.caller, self._capabilities)
        found = await self._searcher.search(call.namespace, search.scope, search.query, deadline=call.deadline)
        scored = [memory_pb2.ScoredMemory(memory=memory_to_proto(r.memory), score=r.score) for r in found.entries]
        # The best results that fit one response: no more than a page may hold.
        return memory_pb2.SearchMemoriesResponse(
            results=scored[: fitting(scored)], ranking=ranking_to_proto(found.ranking), database=answered_by()
        )

    async def GetMemory(
        self, request: memory_pb2.GetMemoryRequest, context: grpc.aio.ServicerContext
    ) -> memory_pb2.GetMemoryResponse:
        call = CALL.get()
        record = await self._store.get_memory(call.namespace, parse_memory_id(request.id), key_scope(call.caller))
        return memory_pb2.GetMemoryResponse(memory=memory_to_proto(record))

    async def ListMemories(
        self, request: memory_pb2.ListMemoriesRequest, context: grpc.aio.ServicerContext
    ) -> memory_pb2.ListMemoriesResponse:
        call = CALL.get()
        listing = parse_list_memories(request, call.caller)
        limit = page_size(request.page_size)
        key = listing.page_key()
        after = self._page_tokens.decode(request.page_token, lambda after: type(after) is int, *key) or 0
        records = await self._store.list_memories(
            call.namespace, listing.store, listing.scope, int(after), limit + 1, listing.filter
        )
        memories, token = self._page_tokens.page(records, limit, memory_to_proto, lambda record: record.seq, *key)
        return memory_pb2.ListMemoriesResponse(memories=memories, next_page_token=token)

    async def DeleteMemories(
        self, request: memory_pb2.DeleteMemoriesRequest, context: grpc.aio.ServicerContext
    ) -> memory_pb2.DeleteMemoriesResponse:
        call = CALL.get()
        delete = parse_delete_memories(request)
        deleted = await self._store.delete_memories(
            call.namespace, delete.ids, delete.allow_missing, key_scope(call.caller), etag=delete.etag
        )
        return memory_pb2.DeleteMemoriesResponse(deleted_count=deleted)

    async def UpdateMemory(
        self, request: memory_pb2.UpdateMemoryRequest, context: grpc.aio.ServicerContext
    ) -> memory_pb2.UpdateMemoryResponse:
        call = CALL.get()
        update = parse_update_memory(request, call.caller)
        # An upsert may add the entry: under the id it names a new entry by.
        target = (await self._new_ids([update.id]))[update.id] if update.allow_missing else update.id
        change = update.change
        if update.needs_embedding:
            (vector,) = await self._embedder.embed([change.content], tenant=call.namespace)
            change = replace(change, vector=tuple(vector), fields=change.fields | {"vector"}, embedded=True)
        record, created = await self._lifecycle.update_memory(
            call.namespace,
            target,
            change,
            etag=update.etag,
            store=update.store,
            allow_missing=update.allow_missing,
            scope=key_scope(call.caller),
            replaced_by=call.caller.key_id,
        )
        return memory_pb2.UpdateMemoryResponse(memory=memory_to_proto(record), created=created)

    async def ListMemoryVersions(
        self, request: memory_pb2.ListMemoryVersionsRequest, context: grpc.aio.ServicerContext
    ) -> memory_pb2.ListMemoryVersionsResponse:
        call = CALL.get()
        memory_id = parse_memory_id(request.id)
        limit = page_size(request.page_size)
        before = self._page_tokens.decode(request.page_token, lambda v: type(v) is int and v > 0, memory_id) or 0
        versions = await self._lifecycle.list_versions(
            call.namespace, memory_id, key_scope(call.caller), before, limit + 1
        )
        items, token = self._page_tokens.page(versions, limit, version_to_proto, lambda v: v.version, memory_id)
        return memory_pb2.ListMemoryVersionsResponse(versions=items, next_page_token=token)

    async def EraseMemories(
        self, request: memory_pb2.EraseMemoriesRequest, context: grpc.aio.ServicerContext
    ) -> memory_pb2.EraseMemoriesResponse:
        call = CALL.get()
        erasing = parse_erase_memories(request, call.caller)
        if erasing.validate_only:
            erased = await self._lifecycle.count(call.namespace, erasing.stores, erasing.scope, erasing.filter)
        else:
            erased = await self._lifecycle.erase(call.namespace, erasing.stores, erasing.scope, erasing.filter)
        return memory_pb2.EraseMemoriesResponse(erased_count=erased)

    async def ExportMemories(
        self, request: memory_pb2.ExportMemoriesRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[memory_pb2.ExportMemoriesResponse]:
        call = CALL.get()
        exporting = parse_export_memories(request, call.caller)
        stores = await self._store.get_stores(call.namespace, exporting.stores)
        missing = [name for name in exporting.stores if name not in stores]
        if missing:
            raise NotFound("store", missing[0])
        yield memory_pb2.ExportMemoriesResponse(stores=[store_to_proto(record) for record in stores.values()])
        async for batch in self._lifecycle.export(call.namespace, list(stores), exporting.scope, exporting.filter):
            memories = [memory_to_proto(record, vector) for record, vector in batch]
            while memories:
                kept = fitting(memories)
                yield memory_pb2.ExportMemoriesResponse(memories=memories[:kept])
                memories = memories[kept:]

    async def ImportMemories(
        self, requests: AsyncIterator[memory_pb2.ImportMemoriesRequest], context: grpc.aio.ServicerContext
    ) -> memory_pb2.ImportMemoriesResponse:
        # Each message before a failing one is imported, so importing the whole stream again finishes the work.
        call = CALL.get()
        totals = memory_pb2.ImportMemoriesResponse()
        known: dict[str, int] = {}
        number = 0
        async for request in requests:
            at = f"requests[{number}]"
            number += 1
            batch = parse_import_batch(request, at, call.caller)
            known |= {store.name: store.dimension for store in batch.stores}
            wanted = [m.store for m in batch.memories if m.store not in known]
            if wanted:
                found = await self._store.get_stores(call.namespace, list(dict.fromkeys(wanted)))
                known |= {name: record.dimension for name, record in found.items()}
                missing = [name for name in wanted if name not in known]
                if missing:
                    raise NotFound("store", missing[0])
            dimensions = {index: known[m.store] for index, m in enumerate(batch.memories)}
            filled = await self._with_vectors([m.memory for m in batch.memories], dimensions, f"{at}.memories")
            imported = [replace(m, memory=memory) for m, memory in zip(batch.memories, filled, strict=True)]
            created, counts = await self._lifecycle.import_batch(call.namespace, batch.stores, imported)
            totals.created_store_count += len(created)
            totals.added_count += counts["added"]
            totals.replaced_count += counts["replaced"]
            totals.unchanged_count += counts["unchanged"]
        return totals

    async def Remember(
        self, request: memory_pb2.RememberRequest, context: grpc.aio.ServicerContext
    ) -> memory_pb2.RememberResponse:
        call = CALL.get()
        remember = parse_remember(request, call.caller, self._capabilities)
        done = await self._rememberer.remember(
            call.namespace,
            remember.store,
            remember.scope,
            remember.turns,
            remember.metadata,
            remember.extract,
            call.caller.key_id,
        )
        return memory_pb2.RememberResponse(
            memories=[
                memory_pb2.RememberedMemory(action=_ACTIONS[action], memory=memory_to_proto(record))
                for action, record in done.memories
            ],
            remembered_turn_count=done.new_turns,
            skipped_turn_count=done.skipped_turns,
        )
