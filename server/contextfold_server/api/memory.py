"""`MemoryService`: stores and entries."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime

import grpc
from contextfold.v1 import memory_pb2, memory_pb2_grpc

from ..embedding import Embedder
from ..engine.conversation import Role
from ..engine.memory import SearchQuery
from ..engine.remember import spoken_turns
from ..errors import InvalidArgument, NotFound, PermissionDenied
from ..memory.remember import Rememberer
from ..memory.search import MemorySearcher
from ..memory.store import (
    UPDATABLE,
    ImportedMemory,
    MemoryChange,
    MemoryVersion,
    NewMemory,
    PostgresMemoryStore,
    StoreRecord,
)
from ..postgres.consistency import answered_by
from .caller import CALLER, caller_namespace, confined, deadline_of, key_scope
from .checks import (
    MAX_BATCH,
    MAX_METADATA_BYTES,
    check_content,
    check_count,
    check_description,
    check_dimension,
    check_max_results,
    check_memory_id,
    check_min_score,
    check_query,
    check_store_name,
    check_store_names,
    check_struct,
    check_text,
    check_vector,
)
from .convert import (
    memory_to_proto,
    new_memories_from_proto,
    ranking_from_proto,
    ranking_to_proto,
    roles_from_proto,
    scope_from_proto,
    store_to_proto,
    struct_to_dict,
    time_from_proto,
    ttl_from_proto,
    turns_from_messages,
)
from .filtering import filter_from_proto
from .paging import PageTokens, fitting, page_size
from .status import reports_errors


class MemoryServicer(memory_pb2_grpc.MemoryServiceServicer):
    def __init__(
        self,
        store: PostgresMemoryStore,
        embedder: Embedder,
        searcher: MemorySearcher,
        page_tokens: PageTokens,
        rememberer: Rememberer,
    ) -> None:
        self._store = store
        self._page_tokens = page_tokens
        self._embedder = embedder
        self._searcher = searcher
        self._rememberer = rememberer

    @reports_errors
    async def CreateStore(
        self, request: memory_pb2.CreateStoreRequest, context: grpc.aio.ServicerContext
    ) -> memory_pb2.CreateStoreResponse:
        store = request.store
        check_store_name(store.name, "store.name")
        check_description(store.description, "store.description")
        dimension = check_dimension(store.dimension or self._embedder.dimension, "store.dimension")
        ttl = ttl_from_proto(store, "store.default_ttl")
        record = await self._store.create_store(
            caller_namespace(context), store.name, store.description, dimension, ttl
        )
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
            filter=filter_from_proto(request.filter, "filter", request.HasField("filter")),
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
            results=scored[: fitting(scored)], ranking=ranking_to_proto(found.ranking), database=answered_by()
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
        tree = filter_from_proto(request.filter, "filter", request.HasField("filter"))
        key = (request.store, scope.user_id, scope.agent_id, scope.session_id, repr(tree))
        after = self._page_tokens.decode(request.page_token, lambda after: type(after) is int, *key) or 0
        records = await self._store.list_memories(
            caller_namespace(context), request.store, scope, int(after), limit + 1, tree
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

    @reports_errors
    async def UpdateMemory(
        self, request: memory_pb2.UpdateMemoryRequest, context: grpc.aio.ServicerContext
    ) -> memory_pb2.UpdateMemoryResponse:
        memory = request.memory
        check_memory_id(memory.id, "memory.id")
        if memory.store or request.allow_missing:
            check_store_name(memory.store, "memory.store")
        paths = set(request.update_mask.paths)
        for index, path in enumerate(request.update_mask.paths):
            if path not in UPDATABLE:
                raise InvalidArgument.of(
                    f"update_mask.paths[{index}]", f"{path!r} is not one of {', '.join(UPDATABLE)}"
                )
        if not paths:
            # AIP-134: no mask means the fields the request sets.
            paths = {name for name in UPDATABLE if _is_set(memory, name)}
            if not paths:
                raise InvalidArgument.of("update_mask", "names no field, and memory sets none to update")
        if request.allow_missing and not memory.content:
            raise InvalidArgument.of("memory.content", "is required to add the entry when its id is free")
        if "content" in paths or request.allow_missing:
            check_content(memory.content, "memory.content")
        check_struct(memory.metadata, "memory.metadata", MAX_METADATA_BYTES)
        check_vector(memory.vector, "memory.vector")
        scope = confined(scope_from_proto(memory, "memory"), "memory")
        change = MemoryChange(
            frozenset(paths),
            content=memory.content,
            metadata=struct_to_dict(memory.metadata),
            scope=scope,
            vector=tuple(memory.vector),
            expire_time=time_from_proto(memory, "expire_time", "memory.expire_time"),
        )
        if ("content" in paths or request.allow_missing) and not change.vector:
            # A new text, a new embedding: unless the caller gives its own.
            (vector,) = await self._embedder.embed([change.content])
            change = replace(change, vector=tuple(vector), fields=change.fields | {"vector"})
        record, created = await self._store.update_memory(
            caller_namespace(context),
            memory.id,
            change,
            etag=memory.etag,
            store=memory.store,
            allow_missing=request.allow_missing,
            scope=key_scope(),
            replaced_by=CALLER.get().key_id,
        )
        return memory_pb2.UpdateMemoryResponse(memory=memory_to_proto(record), created=created)

    @reports_errors
    async def ListMemoryVersions(
        self, request: memory_pb2.ListMemoryVersionsRequest, context: grpc.aio.ServicerContext
    ) -> memory_pb2.ListMemoryVersionsResponse:
        check_memory_id(request.id, "id")
        limit = page_size(request.page_size)
        before = self._page_tokens.decode(request.page_token, lambda v: type(v) is int and v > 0, request.id) or 0
        versions = await self._store.list_versions(
            caller_namespace(context), request.id, key_scope(), before, limit + 1
        )

        def to_proto(version: MemoryVersion) -> memory_pb2.MemoryVersion:
            message = memory_pb2.MemoryVersion(
                version=version.version, memory=memory_to_proto(version.memory), replaced_by=version.replaced_by
            )
            message.memory.ClearField("etag")
            message.replace_time.FromDatetime(version.replace_time)
            return message

        items, token = self._page_tokens.page(versions, limit, to_proto, lambda v: v.version, request.id)
        return memory_pb2.ListMemoryVersionsResponse(versions=items, next_page_token=token)

    @reports_errors
    async def EraseMemories(
        self, request: memory_pb2.EraseMemoriesRequest, context: grpc.aio.ServicerContext
    ) -> memory_pb2.EraseMemoriesResponse:
        check_store_names(request.stores, "stores")
        scope = scope_from_proto(request.scope, "scope")
        tree = filter_from_proto(request.filter, "filter", request.HasField("filter"))
        if not scope.fields() and tree is None:
            raise InvalidArgument.of("scope", "name a scope or a filter (to erase a whole store, delete it)")
        if key_scope().fields():
            # A key bound to a scope erases within it, whatever its role.
            scope = confined(scope, "scope")
        elif CALLER.get().role != "admin":
            raise PermissionDenied(
                "ADMIN_ROLE_REQUIRED", "EraseMemories needs an admin key, or a key bound to the scope erased"
            )
        erased = await self._store.erase(caller_namespace(context), list(dict.fromkeys(request.stores)), scope, tree)
        return memory_pb2.EraseMemoriesResponse(erased_count=erased)

    async def ExportMemories(
        self, request: memory_pb2.ExportMemoriesRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[memory_pb2.ExportMemoriesResponse]:
        # Errors raised here end the call with their status (the call pipeline's `_call`).
        check_store_names(request.stores, "stores")
        scope = confined(scope_from_proto(request.scope, "scope"), "scope")
        tree = filter_from_proto(request.filter, "filter", request.HasField("filter"))
        namespace = caller_namespace(context)
        names = list(dict.fromkeys(request.stores))
        stores = await self._store.get_stores(namespace, names)
        missing = [name for name in names if name not in stores]
        if missing:
            raise NotFound("store", missing[0])
        yield memory_pb2.ExportMemoriesResponse(stores=[store_to_proto(record) for record in stores.values()])
        async for batch in self._store.export(namespace, list(stores), scope, tree):
            memories = [memory_to_proto(record, vector) for record, vector in batch]
            while memories:
                kept = fitting(memories)
                yield memory_pb2.ExportMemoriesResponse(memories=memories[:kept])
                memories = memories[kept:]

    async def ImportMemories(
        self, requests: AsyncIterator[memory_pb2.ImportMemoriesRequest], context: grpc.aio.ServicerContext
    ) -> memory_pb2.ImportMemoriesResponse:
        # Errors raised here end the call with their status (the call pipeline's `_call`); each message
        # before the failing one is imported, so importing the whole stream again finishes the work.
        namespace = caller_namespace(context)
        totals = memory_pb2.ImportMemoriesResponse()
        known: dict[str, int] = {}
        async for number, request in _numbered(requests):
            at = f"requests[{number}]"
            check_count(request.memories, MAX_BATCH, f"{at}.memories", "entries")
            stores = [_imported_store(store, f"{at}.stores[{index}]") for index, store in enumerate(request.stores)]
            new = [
                replace(m, scope=confined(m.scope, f"{at}.memories[{i}]"))
                for i, m in enumerate(new_memories_from_proto(request.memories))
            ]
            imported = []
            for index, (message, memory) in enumerate(zip(request.memories, new, strict=True)):
                check_memory_id(message.id, f"{at}.memories[{index}].id")
                check_store_name(message.store, f"{at}.memories[{index}].store")
                imported.append(
                    ImportedMemory(
                        memory,
                        message.store,
                        time_from_proto(message, "create_time", f"{at}.memories[{index}].create_time"),
                        time_from_proto(message, "update_time", f"{at}.memories[{index}].update_time"),
                    )
                )
            known |= {store.name: store.dimension for store in stores}
            wanted = [m.store for m in imported if m.store not in known]
            if wanted:
                found = await self._store.get_stores(namespace, list(dict.fromkeys(wanted)))
                known |= {name: record.dimension for name, record in found.items()}
                missing = [name for name in wanted if name not in known]
                if missing:
                    raise NotFound("store", missing[0])
            filled = await self._with_vectors(
                [m.memory for m in imported], {i: known[m.store] for i, m in enumerate(imported)}, f"{at}.memories"
            )
            imported = [replace(m, memory=memory) for m, memory in zip(imported, filled, strict=True)]
            created, counts = await self._store.import_batch(namespace, stores, imported)
            totals.created_store_count += len(created)
            totals.added_count += counts["added"]
            totals.replaced_count += counts["replaced"]
            totals.unchanged_count += counts["unchanged"]
        return totals

    @reports_errors
    async def Remember(
        self, request: memory_pb2.RememberRequest, context: grpc.aio.ServicerContext
    ) -> memory_pb2.RememberResponse:
        check_store_name(request.store, "store")
        self._rememberer.check_extract(request.extract, "extract")
        turns = turns_from_messages(request.messages)
        scope = confined(scope_from_proto(request.scope, "scope"), "scope")
        roles = roles_from_proto(request.roles, "roles")
        if request.min_chars < 0:
            raise InvalidArgument.of("min_chars", f"must not be negative, got {request.min_chars}")
        check_text(request.conversation_id, "conversation_id", 256, multiline=False)
        metadata = struct_to_dict(check_struct(request.metadata, "metadata", MAX_METADATA_BYTES))
        identity = (request.store, scope.user_id, scope.agent_id, scope.session_id, request.conversation_id)
        spoken = spoken_turns(turns, roles or {Role.USER}, max(1, request.min_chars), identity)
        done = await self._rememberer.remember(
            caller_namespace(context), request.store, scope, spoken, metadata, request.extract, CALLER.get().key_id
        )
        actions = {
            "added": memory_pb2.RememberedMemory.ACTION_ADDED,
            "updated": memory_pb2.RememberedMemory.ACTION_UPDATED,
        }
        return memory_pb2.RememberResponse(
            memories=[
                memory_pb2.RememberedMemory(action=actions[action], memory=memory_to_proto(record))
                for action, record in done.memories
            ],
            remembered_turn_count=done.new_turns,
            skipped_turn_count=done.skipped_turns,
        )


def _is_set(memory: memory_pb2.Memory, name: str) -> bool:
    """Whether an update's entry sets the field `name` (a mask left empty updates those)."""
    if name in ("metadata", "expire_time"):
        return memory.HasField(name)
    return bool(getattr(memory, name))


def _imported_store(store: memory_pb2.Store, field: str) -> StoreRecord:
    """A store to create, as an export wrote it (its creation time is the import's)."""
    check_store_name(store.name, f"{field}.name")
    check_description(store.description, f"{field}.description")
    dimension = check_dimension(store.dimension, f"{field}.dimension")
    ttl = ttl_from_proto(store, f"{field}.default_ttl")
    return StoreRecord(store.name, store.description, dimension, datetime.now(UTC), default_ttl=ttl)


async def _numbered(
    requests: AsyncIterator[memory_pb2.ImportMemoriesRequest],
) -> AsyncIterator[tuple[int, memory_pb2.ImportMemoriesRequest]]:
    number = 0
    async for request in requests:
        yield number, request
        number += 1
