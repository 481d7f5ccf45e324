"""`Client` and `AsyncClient`: every contextfold call, in agent-shaped Python.

Both clients share one description of each call (`_calls`); they differ only
in how they send it. Messages go in and come out as the dicts agents hold
(see `contextfold.convert`); resources come back as the generated protobuf
messages, which are typed.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

import grpc
from google.protobuf import descriptor_pb2

from . import _requests
from ._requests import FilterLike, InjectOptions, MemoryLike, ScopeLike, SearchOptions
from .convert import MessageDict, from_proto_messages, to_proto_messages
from .errors import from_rpc_error
from .keys import checked_key
from .v1 import (
    conversation_pb2,
    injection_pb2,
    injection_pb2_grpc,
    memory_pb2,
    memory_pb2_grpc,
    provider_pb2,
    provider_pb2_grpc,
)

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing's own from Python 3.11; annotations only

DEFAULT_TARGET = "localhost:50051"


def default_target() -> str:
    """Where a client connects when not told: CONTEXTFOLD_ADDRESS, else localhost:50051."""
    return os.environ.get("CONTEXTFOLD_ADDRESS", DEFAULT_TARGET)


# contextfold's services, by the names `_Call` uses for them.
_SERVICES = {
    "injection": (
        injection_pb2.DESCRIPTOR.services_by_name["InjectionService"],
        injection_pb2_grpc.InjectionServiceStub,
    ),
    "memory": (memory_pb2.DESCRIPTOR.services_by_name["MemoryService"], memory_pb2_grpc.MemoryServiceStub),
    "providers": (provider_pb2.DESCRIPTOR.services_by_name["ProviderService"], provider_pb2_grpc.ProviderServiceStub),
}
# Calls that are safe to repeat (they change nothing, as the protos declare with
# `idempotency_level = NO_SIDE_EFFECTS`) are tried again, after a short backoff, when the
# service is UNAVAILABLE or cut the call off (CANCELLED, never by this client): a replica
# starting, draining or gone, or a proxy between that lost it. Writes are not.
_SAFE_TO_REPEAT = frozenset(
    (name, method.name)
    for name, (service, _) in _SERVICES.items()
    for method in service.methods
    if method.GetOptions().idempotency_level == descriptor_pb2.MethodOptions.NO_SIDE_EFFECTS
)
_RETRIED_CODES = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)
_ATTEMPTS = 3
_BACKOFF = 0.05


class _Attempts:
    """The attempts at one call, all within one deadline: each attempt's time left, and the wait
    before the next one; the error, as contextfold's, when the call must not be tried again."""

    def __init__(self, call: _Call[Any], limit: float | None) -> None:
        self._call = call
        self._deadline = None if limit is None else time.monotonic() + limit

    def __iter__(self) -> Iterator[tuple[int, float | None]]:
        for attempt in range(_ATTEMPTS):
            yield attempt, None if self._deadline is None else max(0.0, self._deadline - time.monotonic())

    def wait_after(self, error: grpc.RpcError, attempt: int) -> float:
        """Seconds to wait before attempt `attempt + 1`; raises `error`, translated, when there is none."""
        backoff = _BACKOFF * 2**attempt
        if (
            (self._call.service, self._call.method) not in _SAFE_TO_REPEAT
            or error.code() not in _RETRIED_CODES
            or attempt + 1 >= _ATTEMPTS
            or (self._deadline is not None and time.monotonic() + backoff >= self._deadline)
        ):
            raise from_rpc_error(error) from None
        return backoff


# Read your writes: a call that wrote answers with a token (its commit's place in the database's
# log, sealed) in this trailing metadata; sent with later calls, it keeps their reads from a read
# replica that has not caught up with it. Tokens are opaque, of one length: the greater text is
# the later write.
READ_AFTER = "x-contextfold-read-after"
_LONGEST_TOKEN = 256


class _Position:
    """The latest write this client made, as the token it sends with every call."""

    def __init__(self, base: tuple[tuple[str, str], ...]) -> None:
        self._base = base
        self._token = ""
        self._lock = threading.Lock()

    def metadata(self) -> tuple[tuple[str, str], ...]:
        token = self._token
        return (*self._base, (READ_AFTER, token)) if token else self._base

    def note(self, trailing: Any) -> None:
        for key, value in trailing or ():
            if key == READ_AFTER and isinstance(value, str) and 0 < len(value) <= _LONGEST_TOKEN:
                with self._lock:
                    self._token = max(self._token, value)


def _call_metadata(api_key: str | None) -> tuple[tuple[str, str], ...]:
    """The metadata sent with every call: the API key (given, else CONTEXTFOLD_API_KEY), if any; one
    that cannot be a key is refused here (`InvalidApiKey`), naming where it came from."""
    source = "api_key" if api_key is not None else "CONTEXTFOLD_API_KEY"
    key = api_key if api_key is not None else os.environ.get("CONTEXTFOLD_API_KEY", "")
    return (("authorization", f"Bearer {checked_key(key, source)}"),) if key else ()


Result = TypeVar("Result")


@dataclass(frozen=True)
class InjectResult:
    """The folded conversation and the report of what was injected, or why not."""

    messages: list[MessageDict]
    report: injection_pb2.InjectionReport
    response: injection_pb2.InjectResponse

    @property
    def injected(self) -> bool:
        return self.report.injected


@dataclass(frozen=True)
class _Call(Generic[Result]):
    service: str
    method: str
    request: Any
    read: Callable[[Any], Result]


_ROLES = {"user": conversation_pb2.ROLE_USER, "assistant": conversation_pb2.ROLE_ASSISTANT}
# What UpdateMemory may change; `expire_time="never"` removes an expiry.
ExpireTime = datetime | Literal["never"] | None


def _fields_of(arguments: dict[str, Any]) -> dict[str, Any]:
    """A method's keyword arguments, from its `locals()`, to pass on whole."""
    return {name: value for name, value in arguments.items() if name not in ("self", "memory_id")}


def _export_request(stores: Sequence[str], scope: ScopeLike, filter: FilterLike) -> memory_pb2.ExportMemoriesRequest:
    return memory_pb2.ExportMemoriesRequest(
        stores=list(stores), scope=_requests.scope(scope), filter=_requests.filter_message(filter)
    )


def _import_request(part: memory_pb2.ImportMemoriesRequest | memory_pb2.ExportMemoriesResponse) -> Any:
    """An export's part as an import's: the same fields."""
    if isinstance(part, memory_pb2.ImportMemoriesRequest):
        return part
    return memory_pb2.ImportMemoriesRequest(stores=part.stores, memories=part.memories)


def _inject_result(response: injection_pb2.InjectResponse) -> InjectResult:
    return InjectResult(from_proto_messages(response.messages), response.report, response)


class _calls:
    """Each RPC as data: the stub, the request, and how to read the response."""

    @staticmethod
    def inject(messages: Iterable[Mapping[str, Any]], options: InjectOptions) -> _Call[InjectResult]:
        return _Call("injection", "Inject", _requests.inject(messages, options), _inject_result)

    @staticmethod
    def create_store(
        name: str, description: str, dimension: int, default_ttl: float | timedelta | None
    ) -> _Call[memory_pb2.Store]:
        store = memory_pb2.Store(
            name=name, description=description, dimension=dimension, default_ttl=_requests.duration(default_ttl)
        )
        return _Call("memory", "CreateStore", memory_pb2.CreateStoreRequest(store=store), lambda r: r.store)

    @staticmethod
    def list_stores(page_token: str) -> _Call[memory_pb2.ListStoresResponse]:
        return _Call("memory", "ListStores", memory_pb2.ListStoresRequest(page_token=page_token), lambda r: r)

    @staticmethod
    def delete_store(name: str, force: bool) -> _Call[int]:
        request = memory_pb2.DeleteStoreRequest(name=name, force=force)
        return _Call("memory", "DeleteStore", request, lambda r: r.deleted_memory_count)

    @staticmethod
    def add_memories(store: str, memories: Iterable[MemoryLike]) -> _Call[list[memory_pb2.Memory]]:
        request = memory_pb2.AddMemoriesRequest(store=store, memories=[_requests.new_memory(m) for m in memories])
        return _Call("memory", "AddMemories", request, lambda r: list(r.memories))

    @staticmethod
    def search_memories(query: str, scope: ScopeLike, options: SearchOptions) -> _Call[list[memory_pb2.ScoredMemory]]:
        request = _requests.search(query, scope, options)
        return _Call("memory", "SearchMemories", request, lambda r: list(r.results))

    @staticmethod
    def get_memory(memory_id: str) -> _Call[memory_pb2.Memory]:
        return _Call("memory", "GetMemory", memory_pb2.GetMemoryRequest(id=memory_id), lambda r: r.memory)

    @staticmethod
    def list_memories(
        store: str, scope: ScopeLike, filter: FilterLike, page_size: int, page_token: str
    ) -> _Call[memory_pb2.ListMemoriesResponse]:
        request = memory_pb2.ListMemoriesRequest(
            store=store,
            scope=_requests.scope(scope),
            filter=_requests.filter_message(filter),
            page_size=page_size,
            page_token=page_token,
        )
        return _Call("memory", "ListMemories", request, lambda r: r)

    @staticmethod
    def delete_memories(ids: Sequence[str], allow_missing: bool, etag: str) -> _Call[int]:
        request = memory_pb2.DeleteMemoriesRequest(ids=list(ids), allow_missing=allow_missing, etag=etag)
        return _Call("memory", "DeleteMemories", request, lambda r: r.deleted_count)

    @staticmethod
    def update_memory(
        memory_id: str,
        *,
        content: str | None,
        metadata: Mapping[str, Any] | None,
        user_id: str | None,
        agent_id: str | None,
        session_id: str | None,
        vector: Sequence[float] | None,
        expire_time: ExpireTime,
        etag: str,
        store: str,
        allow_missing: bool,
    ) -> _Call[memory_pb2.UpdateMemoryResponse]:
        changes = {
            "content": content,
            "metadata": metadata,
            "user_id": user_id,
            "agent_id": agent_id,
            "session_id": session_id,
            "vector": vector,
            "expire_time": expire_time,
        }
        given = {name: value for name, value in changes.items() if value is not None}
        mask = sorted(given)
        if given.get("expire_time") == "never":
            del given["expire_time"]
        memory = _requests.new_memory({"id": memory_id, "store": store, "etag": etag, **given})
        request = memory_pb2.UpdateMemoryRequest(
            memory=memory, update_mask={"paths": mask}, allow_missing=allow_missing
        )
        return _Call("memory", "UpdateMemory", request, lambda r: r)

    @staticmethod
    def list_memory_versions(memory_id: str, page_token: str) -> _Call[memory_pb2.ListMemoryVersionsResponse]:
        request = memory_pb2.ListMemoryVersionsRequest(id=memory_id, page_token=page_token)
        return _Call("memory", "ListMemoryVersions", request, lambda r: r)

    @staticmethod
    def erase_memories(scope: ScopeLike, filter: FilterLike, stores: Sequence[str], validate_only: bool) -> _Call[int]:
        request = memory_pb2.EraseMemoriesRequest(
            scope=_requests.scope(scope),
            filter=_requests.filter_message(filter),
            stores=list(stores),
            validate_only=validate_only,
        )
        return _Call("memory", "EraseMemories", request, lambda r: r.erased_count)

    @staticmethod
    def remember(
        store: str,
        messages: Iterable[Mapping[str, Any]],
        scope: ScopeLike,
        roles: Sequence[str],
        min_chars: int,
        conversation_id: str,
        extract: bool,
        metadata: Mapping[str, Any] | None,
    ) -> _Call[memory_pb2.RememberResponse]:
        unknown = [role for role in roles if role not in _ROLES]
        if unknown:
            raise ValueError(f"unknown role {unknown[0]!r}: expected user or assistant")
        request = memory_pb2.RememberRequest(
            store=store,
            messages=to_proto_messages(messages),
            scope=_requests.scope(scope),
            roles=[_ROLES[role] for role in roles],
            min_chars=min_chars,
            conversation_id=conversation_id,
            extract=extract,
            metadata=_requests.struct(metadata),
        )
        return _Call("memory", "Remember", request, lambda r: r)

    @staticmethod
    def register_provider(name: str, target: str, **settings: Any) -> _Call[provider_pb2.Provider]:
        request = provider_pb2.RegisterProviderRequest(provider=_requests.provider(name, target=target, **settings))
        return _Call("providers", "RegisterProvider", request, lambda r: r.provider)

    @staticmethod
    def get_provider(name: str) -> _Call[provider_pb2.Provider]:
        return _Call("providers", "GetProvider", provider_pb2.GetProviderRequest(name=name), lambda r: r.provider)

    @staticmethod
    def list_providers(page_token: str) -> _Call[provider_pb2.ListProvidersResponse]:
        request = provider_pb2.ListProvidersRequest(page_token=page_token)
        return _Call("providers", "ListProviders", request, lambda r: r)

    @staticmethod
    def update_provider(name: str, **changes: Any) -> _Call[provider_pb2.Provider]:
        request = provider_pb2.UpdateProviderRequest(
            provider=_requests.provider(name, **changes), update_mask={"paths": sorted(changes)}
        )
        return _Call("providers", "UpdateProvider", request, lambda r: r.provider)

    @staticmethod
    def delete_provider(name: str) -> _Call[None]:
        return _Call("providers", "DeleteProvider", provider_pb2.DeleteProviderRequest(name=name), lambda r: None)


class Client:
    """A blocking client. Use as a context manager, or call `close()`.

    `timeout` is the default deadline, in seconds, for every call. `api_key` (else
    CONTEXTFOLD_API_KEY) goes with every call; `credentials` (e.g.
    `grpc.ssl_channel_credentials(...)`) makes the channel TLS.
    """

    def __init__(
        self,
        target: str | None = None,
        *,
        timeout: float | None = 10.0,
        credentials: grpc.ChannelCredentials | None = None,
        channel: grpc.Channel | None = None,
        api_key: str | None = None,
    ) -> None:
        target = target or default_target()
        self._position = _Position(_call_metadata(api_key))
        self._channel = channel or (
            grpc.secure_channel(target, credentials) if credentials else grpc.insecure_channel(target)
        )
        self._stubs = {name: stub(self._channel) for name, (_, stub) in _SERVICES.items()}
        # The streaming calls, which `_run` does not make.
        self._memory = memory_pb2_grpc.MemoryServiceStub(self._channel)
        self.timeout = timeout

    def _run(self, call: _Call[Result], timeout: float | None = None) -> Result:
        method = getattr(self._stubs[call.service], call.method)
        attempts = _Attempts(call, timeout or self.timeout)
        for attempt, left in attempts:
            try:
                response, rpc = method.with_call(call.request, timeout=left, metadata=self._position.metadata())
                self._position.note(rpc.trailing_metadata())
                return call.read(response)
            except grpc.RpcError as error:
                time.sleep(attempts.wait_after(error, attempt))
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _pages(self, call_for: Callable[[str], _Call[Any]], items: str) -> Iterator[Any]:
        """Every item of a paged listing, fetching pages as they are needed."""
        token = ""
        while True:
            page = self._run(call_for(token))
            yield from getattr(page, items)
            token = page.next_page_token
            if not token:
                return

    def inject(
        self, messages: Iterable[Mapping[str, Any]], *, timeout: float | None = None, **options: Unpack[InjectOptions]
    ) -> InjectResult:
        """Fold memory and provider context into `messages` (the dicts agents hold).

        The options (`InjectOptions`, each documented there) are the trigger, memory's search
        (stores, max_entries, query, query_vector, scope, min_score, ranking, filter, …), its
        format, the providers to ask, the token budget, the agent's state, and when the question is
        asked (`asked_time`, for a conversation replayed). `timeout` (seconds) is this call's deadline
        instead of the client's.
        """
        return self._run(_calls.inject(messages, options), timeout)

    def create_store(
        self,
        name: str,
        *,
        description: str = "",
        dimension: int = 0,
        default_ttl: float | timedelta | None = None,
    ) -> memory_pb2.Store:
        """`default_ttl` (seconds or a timedelta): entries added without an `expire_time` expire this long
        after they are added."""
        return self._run(_calls.create_store(name, description, dimension, default_ttl))

    def list_stores(self) -> Iterator[memory_pb2.Store]:
        return self._pages(_calls.list_stores, "stores")

    def delete_store(self, name: str, *, force: bool = False) -> int:
        return self._run(_calls.delete_store(name, force))

    def add_memories(self, store: str, memories: Iterable[MemoryLike]) -> list[memory_pb2.Memory]:
        return self._run(_calls.add_memories(store, memories))

    def search_memories(
        self, query: str = "", *, scope: ScopeLike = None, **options: Unpack[SearchOptions]
    ) -> list[memory_pb2.ScoredMemory]:
        """The entries nearest `query` (or `query_vector`), best first. The options (`SearchOptions`):
        stores, max_results, min_score, query_vector, ranking ("similarity", "store_aware", "hybrid",
        "rerank"; the server's default when not given), filter (a dict: `{"topic": "food", "rating":
        {"gte": 3}}`; see `contextfold._requests.filter_message`), asked_time (a datetime: when the
        question is asked, for the days it names by it, "yesterday"; now when not given)."""
        return self._run(_calls.search_memories(query, scope, options))

    def get_memory(self, memory_id: str) -> memory_pb2.Memory:
        return self._run(_calls.get_memory(memory_id))

    def list_memories(
        self, store: str, *, scope: ScopeLike = None, filter: FilterLike = None, page_size: int = 0
    ) -> Iterator[memory_pb2.Memory]:
        """The store's entries, oldest first; `filter` as `search_memories` takes it."""
        return self._pages(lambda token: _calls.list_memories(store, scope, filter, page_size, token), "memories")

    def delete_memories(self, ids: Sequence[str], *, allow_missing: bool = False, etag: str = "") -> int:
        """Delete the entries, all or none: how many. With `etag` (one id, from the entry as read), `Aborted`
        and nothing deleted when it changed since."""
        return self._run(_calls.delete_memories(ids, allow_missing, etag))

    def update_memory(
        self,
        memory_id: str,
        *,
        content: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        user_id: str | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
        vector: Sequence[float] | None = None,
        expire_time: ExpireTime = None,
        etag: str = "",
        store: str = "",
        allow_missing: bool = False,
    ) -> memory_pb2.UpdateMemoryResponse:
        """Change the fields given (None leaves one as it is; `expire_time="never"` removes an expiry).
        A new `content` is embedded again unless `vector` comes with it. With `etag` (from the entry as
        read), `Aborted` when it changed since; with `allow_missing`, the entry is added to `store` when
        its id is free (`.created` says so)."""
        return self._run(_calls.update_memory(memory_id, **_fields_of(locals())))

    def list_memory_versions(self, memory_id: str) -> Iterator[memory_pb2.MemoryVersion]:
        """The versions the entry's updates replaced, newest first."""
        return self._pages(lambda token: _calls.list_memory_versions(memory_id, token), "versions")

    def erase_memories(
        self,
        *,
        scope: ScopeLike = None,
        filter: FilterLike = None,
        stores: Sequence[str] = (),
        validate_only: bool = False,
    ) -> int:
        """Delete every entry within `scope` and/or matching `filter`, in `stores` (default: all): how many.
        Admin keys, or a key bound to the scope. With `validate_only`, nothing is deleted: how many would be."""
        return self._run(_calls.erase_memories(scope, filter, stores, validate_only))

    def export_memories(
        self,
        *,
        stores: Sequence[str] = (),
        scope: ScopeLike = None,
        filter: FilterLike = None,
        timeout: float | None = None,
    ) -> Iterator[memory_pb2.ExportMemoriesResponse]:
        """The stores (first part), then their entries with vectors, oldest first, part by part."""
        stream = self._memory.ExportMemories(
            _export_request(stores, scope, filter), timeout=timeout, metadata=self._position.metadata()
        )
        try:
            yield from stream
        except grpc.RpcError as error:
            raise from_rpc_error(error) from None

    def import_memories(
        self,
        parts: Iterable[memory_pb2.ImportMemoriesRequest | memory_pb2.ExportMemoriesResponse],
        *,
        timeout: float | None = None,
    ) -> memory_pb2.ImportMemoriesResponse:
        """Import what `export_memories` gave (its parts, or `ImportMemoriesRequest`s): idempotent by id."""
        try:
            response, rpc = self._memory.ImportMemories.with_call(
                (_import_request(part) for part in parts), timeout=timeout, metadata=self._position.metadata()
            )
        except grpc.RpcError as error:
            raise from_rpc_error(error) from None
        self._position.note(rpc.trailing_metadata())
        return response

    def remember(
        self,
        store: str,
        messages: Iterable[Mapping[str, Any]],
        *,
        scope: ScopeLike = None,
        roles: Sequence[str] = ("user",),
        min_chars: int = 0,
        conversation_id: str = "",
        extract: bool = False,
        metadata: Mapping[str, Any] | None = None,
    ) -> memory_pb2.RememberResponse:
        """Store what the conversation's turns of `roles` say (injected context never), each turn once:
        their text, or with `extract` the facts the server's extractor finds, added or updating what is
        kept."""
        return self._run(_calls.remember(store, messages, scope, roles, min_chars, conversation_id, extract, metadata))

    def register_provider(self, name: str, target: str, **settings: Any) -> provider_pb2.Provider:
        """Settings: trigger ("user_turn" or "every_turn"), priority, timeout (seconds), max_tokens, enabled,
        tls ({ca_pem, client_cert_pem, client_key_pem, server_name}), credential ({header, value})."""
        return self._run(_calls.register_provider(name, target, **settings))

    def get_provider(self, name: str) -> provider_pb2.Provider:
        return self._run(_calls.get_provider(name))

    def list_providers(self) -> Iterator[provider_pb2.Provider]:
        return self._pages(_calls.list_providers, "providers")

    def update_provider(self, name: str, **changes: Any) -> provider_pb2.Provider:
        """Change only the settings given: target, trigger, priority, timeout, max_tokens, enabled, tls,
        credential."""
        return self._run(_calls.update_provider(name, **changes))

    def delete_provider(self, name: str) -> None:
        self._run(_calls.delete_provider(name))

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncClient:
    """The asyncio client: the same calls as `Client`, awaited."""

    def __init__(
        self,
        target: str | None = None,
        *,
        timeout: float | None = 10.0,
        credentials: grpc.ChannelCredentials | None = None,
        channel: grpc.aio.Channel | None = None,
        api_key: str | None = None,
    ) -> None:
        target = target or default_target()
        self._position = _Position(_call_metadata(api_key))
        self._channel = channel or (
            grpc.aio.secure_channel(target, credentials) if credentials else grpc.aio.insecure_channel(target)
        )
        self._stubs = {name: stub(self._channel) for name, (_, stub) in _SERVICES.items()}
        # The streaming calls, which `_run` does not make.
        self._memory = memory_pb2_grpc.MemoryServiceStub(self._channel)
        self.timeout = timeout

    async def _run(self, call: _Call[Result], timeout: float | None = None) -> Result:
        method = getattr(self._stubs[call.service], call.method)
        attempts = _Attempts(call, timeout or self.timeout)
        for attempt, left in attempts:
            try:
                rpc = method(call.request, timeout=left, metadata=self._position.metadata())
                response = await rpc
                self._position.note(await rpc.trailing_metadata())
                return call.read(response)
            except grpc.RpcError as error:
                await asyncio.sleep(attempts.wait_after(error, attempt))
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def _pages(self, call_for: Callable[[str], _Call[Any]], items: str) -> AsyncIterator[Any]:
        """Every item of a paged listing, fetching pages as they are needed."""
        token = ""
        while True:
            page = await self._run(call_for(token))
            for item in getattr(page, items):
                yield item
            token = page.next_page_token
            if not token:
                return

    async def inject(
        self, messages: Iterable[Mapping[str, Any]], *, timeout: float | None = None, **options: Unpack[InjectOptions]
    ) -> InjectResult:
        """As `Client.inject`."""
        return await self._run(_calls.inject(messages, options), timeout)

    async def create_store(
        self,
        name: str,
        *,
        description: str = "",
        dimension: int = 0,
        default_ttl: float | timedelta | None = None,
    ) -> memory_pb2.Store:
        return await self._run(_calls.create_store(name, description, dimension, default_ttl))

    def list_stores(self) -> AsyncIterator[memory_pb2.Store]:
        return self._pages(_calls.list_stores, "stores")

    async def delete_store(self, name: str, *, force: bool = False) -> int:
        return await self._run(_calls.delete_store(name, force))

    async def add_memories(self, store: str, memories: Iterable[MemoryLike]) -> list[memory_pb2.Memory]:
        return await self._run(_calls.add_memories(store, memories))

    async def search_memories(
        self, query: str = "", *, scope: ScopeLike = None, **options: Unpack[SearchOptions]
    ) -> list[memory_pb2.ScoredMemory]:
        """As `Client.search_memories`."""
        return await self._run(_calls.search_memories(query, scope, options))

    async def get_memory(self, memory_id: str) -> memory_pb2.Memory:
        return await self._run(_calls.get_memory(memory_id))

    def list_memories(
        self, store: str, *, scope: ScopeLike = None, filter: FilterLike = None, page_size: int = 0
    ) -> AsyncIterator[memory_pb2.Memory]:
        return self._pages(lambda token: _calls.list_memories(store, scope, filter, page_size, token), "memories")

    async def delete_memories(self, ids: Sequence[str], *, allow_missing: bool = False, etag: str = "") -> int:
        """As `Client.delete_memories`."""
        return await self._run(_calls.delete_memories(ids, allow_missing, etag))

    async def update_memory(
        self,
        memory_id: str,
        *,
        content: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        user_id: str | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
        vector: Sequence[float] | None = None,
        expire_time: ExpireTime = None,
        etag: str = "",
        store: str = "",
        allow_missing: bool = False,
    ) -> memory_pb2.UpdateMemoryResponse:
        return await self._run(_calls.update_memory(memory_id, **_fields_of(locals())))

    def list_memory_versions(self, memory_id: str) -> AsyncIterator[memory_pb2.MemoryVersion]:
        return self._pages(lambda token: _calls.list_memory_versions(memory_id, token), "versions")

    async def erase_memories(
        self,
        *,
        scope: ScopeLike = None,
        filter: FilterLike = None,
        stores: Sequence[str] = (),
        validate_only: bool = False,
    ) -> int:
        return await self._run(_calls.erase_memories(scope, filter, stores, validate_only))

    async def export_memories(
        self,
        *,
        stores: Sequence[str] = (),
        scope: ScopeLike = None,
        filter: FilterLike = None,
        timeout: float | None = None,
    ) -> AsyncIterator[memory_pb2.ExportMemoriesResponse]:
        stream = self._memory.ExportMemories(
            _export_request(stores, scope, filter), timeout=timeout, metadata=self._position.metadata()
        )
        try:
            async for part in stream:
                yield part
        except grpc.RpcError as error:
            raise from_rpc_error(error) from None

    async def import_memories(
        self,
        parts: Iterable[memory_pb2.ImportMemoriesRequest | memory_pb2.ExportMemoriesResponse]
        | AsyncIterable[memory_pb2.ImportMemoriesRequest | memory_pb2.ExportMemoriesResponse],
        *,
        timeout: float | None = None,
    ) -> memory_pb2.ImportMemoriesResponse:
        async def requests() -> AsyncIterator[memory_pb2.ImportMemoriesRequest]:
            if isinstance(parts, AsyncIterable):
                async for part in parts:
                    yield _import_request(part)
            else:
                for part in parts:
                    yield _import_request(part)

        try:
            rpc = self._memory.ImportMemories(requests(), timeout=timeout, metadata=self._position.metadata())
            response = await rpc
            self._position.note(await rpc.trailing_metadata())
        except grpc.RpcError as error:
            raise from_rpc_error(error) from None
        return response

    async def remember(
        self,
        store: str,
        messages: Iterable[Mapping[str, Any]],
        *,
        scope: ScopeLike = None,
        roles: Sequence[str] = ("user",),
        min_chars: int = 0,
        conversation_id: str = "",
        extract: bool = False,
        metadata: Mapping[str, Any] | None = None,
    ) -> memory_pb2.RememberResponse:
        return await self._run(
            _calls.remember(store, messages, scope, roles, min_chars, conversation_id, extract, metadata)
        )

    async def register_provider(self, name: str, target: str, **settings: Any) -> provider_pb2.Provider:
        return await self._run(_calls.register_provider(name, target, **settings))

    async def get_provider(self, name: str) -> provider_pb2.Provider:
        return await self._run(_calls.get_provider(name))

    def list_providers(self) -> AsyncIterator[provider_pb2.Provider]:
        return self._pages(_calls.list_providers, "providers")

    async def update_provider(self, name: str, **changes: Any) -> provider_pb2.Provider:
        return await self._run(_calls.update_provider(name, **changes))

    async def delete_provider(self, name: str) -> None:
        await self._run(_calls.delete_provider(name))

    async def close(self) -> None:
        await self._channel.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
