"""Each request, turned once into a value that cannot be invalid: parse, don't validate.

A servicer reads: parse (here: every field against its rule, `fields.py`, the rules that span
fields, defaults filled in, the scope confined to the caller's key) → the compile check of the
caller's expressions and templates (`check_compiles`, in the sandbox: the one costly check, run
last) → the use case → the response (`responses.py`). Whatever the parse refuses is the
caller's INVALID_ARGUMENT (or PERMISSION_DENIED for a scope the key may not name), naming the
field and why, before anything else is done.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from contextfold.v1 import conversation_pb2, injection_pb2, memory_pb2, provider_pb2
from google.protobuf import json_format, struct_pb2
from google.protobuf.message import Message

from ..access.keys import Caller
from ..access.policy import confine
from ..customize.expressions import MAX_EXPRESSION_LENGTH
from ..customize.sandbox import Sandbox, SandboxFailed, SandboxTimeout
from ..customize.templates import MAX_TEMPLATE_LENGTH
from ..engine.conversation import InjectedRef, Role, Turn
from ..engine.filters import Filter
from ..engine.format import MemoryFormat
from ..engine.memory import DEFAULT_MAX_ENTRIES, MEMORY_SOURCE, MemoryRequest, SearchQuery
from ..engine.ranking import Ranking
from ..engine.region import COALESCED_SOURCE
from ..engine.remember import SpokenTurn, injected_texts, is_own, own_text, spoken_turns
from ..engine.trigger import Trigger
from ..errors import FieldViolation, InvalidArgument, Unavailable
from ..memory.records import (
    MAX_CONTENT_CHARS,
    UPDATABLE,
    ImportedMemory,
    MemoryChange,
    NewMemory,
    Scope,
    StoreRecord,
    text_fault,
)
from .fields import (
    MAX_AGENT_FIELD_CHARS,
    MAX_APP_STATE_BYTES,
    MAX_BATCH,
    MAX_ENTRIES_LIMIT,
    MAX_MESSAGES,
    MAX_METADATA_BYTES,
    check_content,
    check_content_blocks,
    check_count,
    check_credential,
    check_description,
    check_dimension,
    check_max_entries,
    check_max_results,
    check_max_tokens,
    check_memory_id,
    check_min_score,
    check_pem,
    check_provider_name,
    check_provider_names,
    check_provider_timeout,
    check_query,
    check_scope_value,
    check_server_name,
    check_store_name,
    check_store_names,
    check_struct,
    check_target,
    check_text,
    check_vector,
)
from .filtering import filter_from_proto

T = TypeVar("T")

# Sources whose names are contextfold's own: no provider may take one.
RESERVED_SOURCES = (MEMORY_SOURCE, COALESCED_SOURCE)
# A store's default time-to-live: at most ten years.
MAX_TTL_SECONDS = 3650 * 86400
DEFAULT_PROVIDER_TIMEOUT_MS = 1000
# SearchMemories' results when the request asks for no number: as many as an Inject offers.
DEFAULT_MAX_RESULTS = DEFAULT_MAX_ENTRIES
# A Remember's conversation id: a label, on one line.
MAX_CONVERSATION_ID_CHARS = 256

_ROLES = {conversation_pb2.ROLE_USER: Role.USER, conversation_pb2.ROLE_ASSISTANT: Role.ASSISTANT}
_ROLE_EXPECTED = "must be ROLE_USER or ROLE_ASSISTANT"
_TRIGGERS = {
    injection_pb2.TRIGGER_UNSPECIFIED: Trigger.USER_TURN,
    injection_pb2.TRIGGER_USER_TURN: Trigger.USER_TURN,
    injection_pb2.TRIGGER_EVERY_TURN: Trigger.EVERY_TURN,
}
_FORMATS = {
    injection_pb2.FORMAT_UNSPECIFIED: MemoryFormat.XML,
    injection_pb2.FORMAT_XML: MemoryFormat.XML,
    injection_pb2.FORMAT_BULLETS: MemoryFormat.BULLETS,
    injection_pb2.FORMAT_MARKDOWN: MemoryFormat.MARKDOWN,
}
RANKINGS = {
    memory_pb2.RANKING_SIMILARITY: Ranking.SIMILARITY,
    memory_pb2.RANKING_STORE_AWARE: Ranking.STORE_AWARE,
    memory_pb2.RANKING_HYBRID: Ranking.HYBRID,
    memory_pb2.RANKING_RERANK: Ranking.RERANK,
}
_WHAT = {
    "trigger": "is not a valid CEL trigger expression",
    "query": "is not a valid CEL query expression",
    "format": "is not a valid template",
}


@dataclass(frozen=True)
class Capabilities:
    """What this server can do, which some requests depend on: a reranker for `RANKING_RERANK`, an
    extractor for Remember's `extract`, and its embedder's dimension for a store that names none."""

    reranker: bool
    extractor: bool
    embedding_dimension: int


# A customization to compile: (kind, source, field), kind one of `_WHAT`.
Customization = tuple[str, str, str]


# Conversation


def turns_from_messages(messages: Sequence[conversation_pb2.Message]) -> list[Turn]:
    """The engine's view of the conversation. Rejects what no agent would send."""
    check_count(messages, MAX_MESSAGES, "messages", "messages")
    check_content_blocks(sum(len(message.content) for message in messages))
    violations: list[FieldViolation] = []
    turns: list[Turn] = []
    for index, message in enumerate(messages):
        role = _ROLES.get(message.role)
        if role is None:
            violations.append(FieldViolation(f"messages[{index}].role", _ROLE_EXPECTED))
            continue
        texts: list[str] = []
        injected: list[InjectedRef] = []
        has_tool_result = False
        for position, block in enumerate(message.content):
            kind = block.WhichOneof("block")
            if kind is None:
                violations.append(FieldViolation(f"messages[{index}].content[{position}]", "no block kind is set"))
            elif kind == "text":
                texts.append(block.text)
            elif kind == "tool_result":
                has_tool_result = True
            elif kind == "injected":
                # Each field read once: a conversation may hold 20,000 such blocks.
                shown = block.injected
                ids, sources = shown.entry_ids, shown.sources
                if len(ids) > MAX_ENTRIES_LIMIT:
                    violations.append(
                        FieldViolation(
                            f"messages[{index}].content[{position}].injected.entry_ids",
                            f"holds {len(ids)} ids; a block holds at most {MAX_ENTRIES_LIMIT}",
                        )
                    )
                injected.append(
                    InjectedRef(shown.source, tuple(ids) if ids else (), tuple(sources) if sources else (), shown.text)
                )
        turns.append(Turn(role, tuple(texts), has_tool_result, tuple(injected)))
    if violations:
        raise InvalidArgument(*violations)
    return turns


def _roles(values: Sequence[int], field: str) -> set[Role]:
    """The roles named at `field` (a repeated Role), each a user's or an assistant's."""
    roles = set()
    for index, value in enumerate(values):
        if value not in _ROLES:
            raise InvalidArgument.of(f"{field}[{index}]", _ROLE_EXPECTED)
        roles.add(_ROLES[value])
    return roles


def _enum_value(table: dict[int, T], value: int, field: str, what: str) -> T:
    """What an enum's number stands for; INVALID_ARGUMENT naming the field for a number it does not know."""
    if value not in table:
        raise InvalidArgument.of(field, f"unknown {what} value {value}")
    return table[value]


def _one_of(field: str, other: str, both_set: bool) -> None:
    """Refuse a request that sets `field` and the `other` field it replaces."""
    if both_set:
        raise InvalidArgument.of(field, f"replaces {other}; set one of them, not both")


def _customization(kind: str, source: str, field: str) -> str:
    """A `trigger` or `query` expression, or a `format` template, within its length; whether it compiles
    is `check_compiles`'s to say."""
    limit = MAX_TEMPLATE_LENGTH if kind == "format" else MAX_EXPRESSION_LENGTH
    if len(source) > limit:
        raise InvalidArgument.of(field, f"{_WHAT[kind]}: is {len(source)} characters; at most {limit}")
    return source


def _trigger(value: int, field: str) -> Trigger:
    return _enum_value(_TRIGGERS, value, field, "trigger")


def _trigger_expression(expression: str, trigger: int, field: str, trigger_field: str) -> str:
    """A CEL trigger, within its length; it replaces the named trigger, so the two cannot both be set."""
    _one_of(field, trigger_field, bool(expression) and trigger != injection_pb2.TRIGGER_UNSPECIFIED)
    return _customization("trigger", expression, field)


def _ranking(value: int, field: str, capabilities: Capabilities) -> Ranking | None:
    """The ranking asked for; None (the server's default) for RANKING_UNSPECIFIED. The reranker only
    where one is configured."""
    if value == memory_pb2.RANKING_UNSPECIFIED:
        return None
    ranking = _enum_value(RANKINGS, value, field, "ranking")
    if ranking is Ranking.RERANK and not capabilities.reranker:
        raise InvalidArgument.of(field, "RANKING_RERANK needs a reranker, and this server has none configured")
    return ranking


def _scope(scope: memory_pb2.Scope | memory_pb2.Memory, field: str) -> Scope:
    """The scope of a request, or of an entry to add; `field` is where it sits in the request."""
    return Scope(
        user_id=check_scope_value(scope.user_id, f"{field}.user_id"),
        agent_id=check_scope_value(scope.agent_id, f"{field}.agent_id"),
        session_id=check_scope_value(scope.session_id, f"{field}.session_id"),
    )


def _confined_scope(scope: memory_pb2.Scope | memory_pb2.Memory, field: str, caller: Caller) -> Scope:
    return confine(caller, _scope(scope, field), field)


def _filter(message: Message, field: str = "filter") -> Filter | None:
    return filter_from_proto(getattr(message, "filter"), field, message.HasField("filter"))  # noqa: B009


def _metadata(value: struct_pb2.Struct, field: str) -> dict[str, Any]:
    return json_format.MessageToDict(check_struct(value, field, MAX_METADATA_BYTES))


def _time(message: Message, name: str, field: str) -> datetime | None:
    """The time in `message`'s field `name`, None when unset; INVALID_ARGUMENT when it is no time
    (Postgres keeps years 1 to 9999 here as protobuf does)."""
    if not message.HasField(name):
        return None
    try:
        return getattr(message, name).ToDatetime(tzinfo=UTC)
    except (ValueError, OverflowError) as error:
        raise InvalidArgument.of(field, f"is not a time: {error}") from None


def _expiry(memory: memory_pb2.Memory, field: str) -> datetime | None:
    """An entry's new expiry: none, or a time still to come (an entry that has expired is returned by no
    call, so a write that says it expired already is refused rather than lost)."""
    expire_time = _time(memory, "expire_time", field)
    if expire_time is not None and expire_time <= datetime.now(UTC):
        raise InvalidArgument.of(field, f"is past ({expire_time.isoformat()}): an entry expires in the future")
    return expire_time


def _ttl(store: memory_pb2.Store, field: str) -> timedelta | None:
    """A store's default time-to-live: None for unset or zero, else at least a second."""
    if not store.HasField("default_ttl"):
        return None
    ttl = store.default_ttl
    if ttl.seconds < 0 or ttl.nanos < 0 or not 0 <= ttl.nanos < 1_000_000_000:
        raise InvalidArgument.of(field, "must not be negative")
    if ttl.seconds == 0 and ttl.nanos == 0:
        return None
    if ttl.seconds < 1 or ttl.seconds > MAX_TTL_SECONDS:
        raise InvalidArgument.of(field, f"must be from 1 second to {MAX_TTL_SECONDS // 86400} days")
    return ttl.ToTimedelta()


def _search_query(
    text: str, vector: Sequence[float], stores: Sequence[str], at: str, message: Message, capabilities: Capabilities
) -> dict[str, Any]:
    """What Inject's memory options and SearchMemories share, checked alike (`at`: where the options sit
    in the request, "" or "memory."): the query, its vector, the stores, the least score, the ranking,
    the filter and when the question is asked, as `SearchQuery`'s fields."""
    check_query(text, f"{at}query")
    check_vector(vector, f"{at}query_vector")
    check_store_names(stores, f"{at}stores")
    return {
        "text": text,
        "vector": tuple(vector),
        "stores": tuple(dict.fromkeys(stores)),
        "min_score": check_min_score(message, f"{at}min_score"),
        "ranking": _ranking(getattr(message, "ranking"), f"{at}ranking", capabilities),  # noqa: B009
        "filter": _filter(message, f"{at}filter"),
        "asked_time": _time(message, "asked_time", f"{at}asked_time"),
    }


# Injection


@dataclass(frozen=True)
class InjectCall:
    turns: list[Turn]
    memory: MemoryRequest
    # Within the caller's key.
    scope: Scope
    max_tokens: int
    # The providers named, each once; none named: every registered one.
    providers: tuple[str, ...]
    coalesce: bool
    # The caller's expressions and templates, for `check_compiles`.
    customizations: tuple[Customization, ...] = field(default=())


def parse_inject(request: injection_pb2.InjectRequest, caller: Caller, capabilities: Capabilities) -> InjectCall:
    turns = turns_from_messages(request.messages)
    # What an Inject passes on to expressions and providers: its app state and its agent.
    check_struct(request.app_state, "app_state", MAX_APP_STATE_BYTES)
    check_text(request.agent.id, "agent.id", MAX_AGENT_FIELD_CHARS, multiline=False)
    check_text(request.agent.name, "agent.name", MAX_AGENT_FIELD_CHARS, multiline=False)
    options = request.memory
    trigger_expression = _trigger_expression(
        request.trigger_expression, request.trigger, "trigger_expression", "trigger"
    )
    _one_of("memory.query_expression", "memory.query", bool(options.query_expression and options.query))
    query_expression = _customization("query", options.query_expression, "memory.query_expression")
    memory_format = _enum_value(_FORMATS, options.format, "memory.format", "format")
    if options.format_template:
        _one_of("memory.format_template", "memory.format", options.format != injection_pb2.FORMAT_UNSPECIFIED)
    format_template = _customization("format", options.format_template, "memory.format_template")
    max_entries = options.max_entries if options.HasField("max_entries") else DEFAULT_MAX_ENTRIES
    searched = _search_query(options.query, options.query_vector, options.stores, "memory.", options, capabilities)
    memory = MemoryRequest(
        trigger=_trigger(request.trigger, "trigger"),
        max_entries=check_max_entries(max_entries, "memory.max_entries"),
        query=searched["text"],
        query_vector=searched["vector"],
        stores=searched["stores"],
        min_score=searched["min_score"],
        priority=options.priority,
        max_tokens=check_max_tokens(options.max_tokens, "memory.max_tokens"),
        trigger_expression=trigger_expression,
        query_expression=query_expression,
        format=memory_format,
        format_template=format_template,
        ranking=searched["ranking"],
        filter=searched["filter"],
        asked_time=searched["asked_time"],
        explain=request.explain,
    )
    check_provider_names(request.providers, "providers", RESERVED_SOURCES)
    return InjectCall(
        turns=turns,
        memory=memory,
        scope=_confined_scope(options.scope, "memory.scope", caller),
        max_tokens=check_max_tokens(request.max_tokens, "max_tokens"),
        providers=tuple(request.providers),
        coalesce=request.coalesce,
        customizations=(
            ("trigger", trigger_expression, "trigger_expression"),
            ("query", query_expression, "memory.query_expression"),
            ("format", format_template, "memory.format_template"),
        ),
    )


async def check_compiles(
    sandbox: Sandbox,
    customizations: Sequence[Customization],
    tenant: str,
    within: float | None,
    *,
    to_store: bool,
) -> None:
    """Refuse each `(kind, source, field)` whose source does not compile, naming why.

    Compiling runs in the sandbox, never on the event loop: Jinja2 and CEL do real work
    at compile time, which an adversarial template can make arbitrarily large. A source
    that takes longer than the sandbox's time limit to compile is refused as well. When the
    caller's time (`within` seconds) runs out first, a source `to_store` is refused with
    UNAVAILABLE (retry), never stored unchecked; one for this call only goes on unchecked, to
    fail open later if it must; so does one the sandbox could not judge (`SandboxFailed`).
    """
    asked = [(kind, source, field) for kind, source, field in customizations if source]
    try:
        failures = await asyncio.gather(*(sandbox.check(kind, source, tenant, within) for kind, source, _ in asked))
    except SandboxTimeout as timeout:
        if to_store:
            raise Unavailable("SANDBOX_BUSY", f"could not check the expression in time: {timeout}") from None
        return
    except SandboxFailed as failed:
        # No verdict: the sandbox itself failed (a worker died under load, say), not the expression.
        if to_store:
            raise Unavailable("SANDBOX_FAILED", f"could not check the expression: the sandbox {failed}") from None
        return
    violations = [
        FieldViolation(field, f"{_WHAT[kind]}: {failure.removeprefix('ValueError: ')}")
        for (kind, _, field), failure in zip(asked, failures, strict=True)
        if failure is not None
    ]
    if violations:
        raise InvalidArgument(*violations)


# Stores


@dataclass(frozen=True)
class NewStore:
    name: str
    description: str
    dimension: int
    default_ttl: timedelta | None


def _store(store: memory_pb2.Store, at: str, default_dimension: int = 0) -> NewStore:
    return NewStore(
        name=check_store_name(store.name, f"{at}.name"),
        description=check_description(store.description, f"{at}.description"),
        dimension=check_dimension(store.dimension or default_dimension, f"{at}.dimension"),
        default_ttl=_ttl(store, f"{at}.default_ttl"),
    )


def parse_create_store(request: memory_pb2.CreateStoreRequest, capabilities: Capabilities) -> NewStore:
    return _store(request.store, "store", capabilities.embedding_dimension)


def parse_delete_store(request: memory_pb2.DeleteStoreRequest) -> str:
    return check_store_name(request.name, "name")


# Entries


def new_memories(
    memories: Sequence[memory_pb2.Memory], caller: Caller, at: str = "memories", *, imported: bool = False
) -> list[NewMemory]:
    """The entries to add, each checked and confined to the caller's key; every bad field of every
    entry is named at once. An entry `imported` keeps the expiry its export wrote, even one past."""
    violations: list[FieldViolation] = []
    seen: dict[str, int] = {}

    def collect(check: Callable[..., Any], *args: Any) -> Any:
        try:
            return check(*args)
        except InvalidArgument as error:
            violations.extend(error.violations)
            return None

    new: list[NewMemory] = []
    for index, memory in enumerate(memories):
        field = f"{at}[{index}]"
        collect(check_content, memory.content, f"{field}.content")
        metadata = collect(_metadata, memory.metadata, f"{field}.metadata") or {}
        scope = collect(_scope, memory, field)
        if memory.id:
            collect(check_memory_id, memory.id, f"{field}.id")
            if memory.id in seen:
                violations.append(FieldViolation(f"{field}.id", f"repeats the id of {at}[{seen[memory.id]}]"))
            seen.setdefault(memory.id, index)
        collect(check_vector, memory.vector, f"{field}.vector")
        if imported:
            expire_time = collect(_time, memory, "expire_time", f"{field}.expire_time")
        else:
            expire_time = collect(_expiry, memory, f"{field}.expire_time")
        new.append(NewMemory(memory.content, tuple(memory.vector), memory.id, metadata, scope or Scope(), expire_time))
    if violations:
        raise InvalidArgument(*violations)
    return [
        NewMemory(m.content, m.vector, m.id, m.metadata, confine(caller, m.scope, f"{at}[{index}]"), m.expire_time)
        for index, m in enumerate(new)
    ]


@dataclass(frozen=True)
class AddCall:
    store: str
    memories: list[NewMemory]


def parse_add_memories(request: memory_pb2.AddMemoriesRequest, caller: Caller) -> AddCall:
    store = check_store_name(request.store, "store")
    if not request.memories:
        raise InvalidArgument.of("memories", "must hold at least one entry")
    check_count(request.memories, MAX_BATCH, "memories", "entries")
    return AddCall(store, new_memories(request.memories, caller))


@dataclass(frozen=True)
class SearchCall:
    scope: Scope
    query: SearchQuery


def parse_search_memories(
    request: memory_pb2.SearchMemoriesRequest, caller: Caller, capabilities: Capabilities
) -> SearchCall:
    if not request.query.strip() and not request.query_vector:
        raise InvalidArgument.of("query", "must not be blank unless query_vector is given")
    searched = _search_query(request.query, request.query_vector, request.stores, "", request, capabilities)
    limit = check_max_results(request.max_results, "max_results") or DEFAULT_MAX_RESULTS
    query = SearchQuery(**searched, limit=limit, exclude_ids=frozenset())
    return SearchCall(_confined_scope(request.scope, "scope", caller), query)


def parse_memory_id(memory_id: str, field: str = "id") -> str:
    return check_memory_id(memory_id, field)


@dataclass(frozen=True)
class ListCall:
    store: str
    scope: Scope
    filter: Filter | None

    def page_key(self) -> tuple[str, ...]:
        """What a page token is bound to: the same store, scope and filter."""
        return (self.store, self.scope.user_id, self.scope.agent_id, self.scope.session_id, repr(self.filter))


def parse_list_memories(request: memory_pb2.ListMemoriesRequest, caller: Caller) -> ListCall:
    return ListCall(
        check_store_name(request.store, "store"), _confined_scope(request.scope, "scope", caller), _filter(request)
    )


@dataclass(frozen=True)
class DeleteCall:
    # The ids to delete, each once.
    ids: list[str]
    # With one id, the version it may be deleted in; "" for any.
    etag: str
    # Ids that hold nothing are not an error.
    allow_missing: bool


def parse_delete_memories(request: memory_pb2.DeleteMemoriesRequest) -> DeleteCall:
    if not request.ids:
        raise InvalidArgument.of("ids", "must name at least one entry")
    check_count(request.ids, MAX_BATCH, "ids", "ids")
    for index, memory_id in enumerate(request.ids):
        check_memory_id(memory_id, f"ids[{index}]")
    ids = list(dict.fromkeys(request.ids))
    if request.etag and len(ids) != 1:
        raise InvalidArgument.of("etag", f"names one entry's version: give one id with it, not {len(ids)}")
    # Opaque, compared as it came (as UpdateMemory's): one that matches no version deletes nothing.
    return DeleteCall(ids, request.etag, request.allow_missing)


@dataclass(frozen=True)
class UpdateCall:
    id: str
    # The store the entry is in, or is added to (`allow_missing`); "" for an update that names none.
    store: str
    change: MemoryChange
    etag: str
    allow_missing: bool

    @property
    def needs_embedding(self) -> bool:
        """New text without a vector of the caller's: the embedder gives it one."""
        return ("content" in self.change.fields or self.allow_missing) and not self.change.vector


def parse_update_memory(request: memory_pb2.UpdateMemoryRequest, caller: Caller) -> UpdateCall:
    memory = request.memory
    check_memory_id(memory.id, "memory.id")
    if memory.store or request.allow_missing:
        check_store_name(memory.store, "memory.store")
    paths = set(request.update_mask.paths)
    for index, path in enumerate(request.update_mask.paths):
        if path not in UPDATABLE:
            raise InvalidArgument.of(f"update_mask.paths[{index}]", f"{path!r} is not one of {', '.join(UPDATABLE)}")
    if not paths:
        # AIP-134: no mask means the fields the request sets.
        paths = {name for name in UPDATABLE if _is_set(memory, name)}
        if not paths:
            raise InvalidArgument.of("update_mask", "names no field, and memory sets none to update")
    if request.allow_missing and not memory.content:
        raise InvalidArgument.of("memory.content", "is required to add the entry when its id is free")
    if "content" in paths or request.allow_missing:
        check_content(memory.content, "memory.content")
    metadata = _metadata(memory.metadata, "memory.metadata")
    check_vector(memory.vector, "memory.vector")
    change = MemoryChange(
        frozenset(paths),
        content=memory.content,
        metadata=metadata,
        scope=_confined_scope(memory, "memory", caller),
        vector=tuple(memory.vector),
        expire_time=_expiry(memory, "memory.expire_time"),
    )
    return UpdateCall(memory.id, memory.store, change, memory.etag, request.allow_missing)


def _is_set(memory: memory_pb2.Memory, name: str) -> bool:
    """Whether an update's entry sets the field `name` (a mask left empty updates those)."""
    if name in ("metadata", "expire_time"):
        return memory.HasField(name)
    return bool(getattr(memory, name))


@dataclass(frozen=True)
class Selection:
    """The entries an erasure or an export reaches: of these stores (every store when none), within the
    scope, matching the filter."""

    stores: list[str]
    scope: Scope
    filter: Filter | None


@dataclass(frozen=True)
class EraseCall(Selection):
    """An erasure's selection, and whether it only counts (`validate_only`)."""

    validate_only: bool = False


def parse_erase_memories(request: memory_pb2.EraseMemoriesRequest, caller: Caller) -> EraseCall:
    check_store_names(request.stores, "stores")
    scope = _scope(request.scope, "scope")
    tree = _filter(request)
    if not scope.fields() and tree is None:
        raise InvalidArgument.of("scope", "name a scope or a filter (to erase a whole store, delete it)")
    return EraseCall(list(dict.fromkeys(request.stores)), confine(caller, scope, "scope"), tree, request.validate_only)


def parse_export_memories(request: memory_pb2.ExportMemoriesRequest, caller: Caller) -> Selection:
    check_store_names(request.stores, "stores")
    return Selection(
        list(dict.fromkeys(request.stores)), _confined_scope(request.scope, "scope", caller), _filter(request)
    )


@dataclass(frozen=True)
class ImportBatch:
    stores: list[StoreRecord]
    memories: list[ImportedMemory]


def parse_import_batch(request: memory_pb2.ImportMemoriesRequest, at: str, caller: Caller) -> ImportBatch:
    """One message of an import (`at`: `requests[N]`): the stores to create, as an export wrote them (their
    creation time is the import's), and the entries, each with its own id, store and times."""
    check_count(request.memories, MAX_BATCH, f"{at}.memories", "entries")
    stores = []
    for index, message in enumerate(request.stores):
        new = _store(message, f"{at}.stores[{index}]")
        stores.append(StoreRecord(new.name, new.description, new.dimension, datetime.now(UTC), 0, new.default_ttl))
    imported = []
    entries = new_memories(request.memories, caller, f"{at}.memories", imported=True)
    for index, (message, memory) in enumerate(zip(request.memories, entries, strict=True)):
        field = f"{at}.memories[{index}]"
        check_memory_id(message.id, f"{field}.id")
        check_store_name(message.store, f"{field}.store")
        created = _time(message, "create_time", f"{field}.create_time")
        updated = _time(message, "update_time", f"{field}.update_time")
        imported.append(ImportedMemory(memory, message.store, created, updated))
    return ImportBatch(stores, imported)


@dataclass(frozen=True)
class RememberCall:
    store: str
    scope: Scope
    turns: list[SpokenTurn]
    metadata: dict[str, Any]
    extract: bool


def parse_remember(request: memory_pb2.RememberRequest, caller: Caller, capabilities: Capabilities) -> RememberCall:
    store = check_store_name(request.store, "store")
    if request.extract and not capabilities.extractor:
        raise InvalidArgument.of("extract", "needs an extractor, and this server has none configured")
    turns = turns_from_messages(request.messages)
    scope = _confined_scope(request.scope, "scope", caller)
    roles = _roles(request.roles, "roles") or {Role.USER}
    injected = injected_texts(turns)
    for index, (message, turn) in enumerate(zip(request.messages, turns, strict=True)):
        fault = remember_fault(message, turn, injected, request.extract) if turn.role in roles else None
        if fault:
            raise InvalidArgument.of(f"messages[{index}]{fault[0]}", fault[1])
    if request.min_chars < 0:
        raise InvalidArgument.of("min_chars", f"must not be negative, got {request.min_chars}")
    check_text(request.conversation_id, "conversation_id", MAX_CONVERSATION_ID_CHARS, multiline=False)
    metadata = _metadata(request.metadata, "metadata")
    identity = (store, scope.user_id, scope.agent_id, scope.session_id, request.conversation_id)
    spoken = spoken_turns(turns, roles, max(1, request.min_chars), identity)
    return RememberCall(store, scope, spoken, metadata, request.extract)


def remember_fault(
    message: conversation_pb2.Message, turn: Turn, injected: Collection[str], extract: bool
) -> tuple[str, str] | None:
    """What of a turn Remember would keep no entry may hold, as the field under the message and why: a
    control character in a text block of its own words (`.content[j].text`; `engine.remember.is_own`), or,
    when the turn is kept as it is (not `extract`), more of its own words than an entry's content holds
    (the message itself). None when it may be kept. An entry holds neither, as AddMemories has it (and
    an export imports again); Postgres' text cannot hold a NUL. What is not kept (injected context
    repeated) may hold what it likes."""
    for position, block in enumerate(message.content):
        if block.WhichOneof("block") == "text" and is_own(block.text, injected):
            fault = text_fault(block.text)
            if fault:
                return f".content[{position}].text", fault
    if not extract and len(own := own_text(turn, injected)) > MAX_CONTENT_CHARS:
        return "", (
            f"holds {len(own)} characters of its own text, and an entry at most {MAX_CONTENT_CHARS}:"
            " add a longer text with AddMemories, in entries of its parts"
        )
    return None


# Providers

PROVIDER_FIELDS = frozenset(
    {"target", "trigger", "trigger_expression", "priority", "timeout", "max_tokens", "enabled", "tls", "credential"}
)


@dataclass(frozen=True)
class ProviderChange:
    """A registration or an update: the provider's name, and the stored columns of the fields it sets."""

    name: str
    fields: dict[str, Any]

    @property
    def customizations(self) -> tuple[Customization, ...]:
        return (("trigger", self.fields.get("trigger_expression", ""), "provider.trigger_expression"),)


def parse_provider_name(name: str, field: str = "name") -> str:
    return check_provider_name(name, field, RESERVED_SOURCES)


def parse_register_provider(request: provider_pb2.RegisterProviderRequest) -> ProviderChange:
    name = parse_provider_name(request.provider.name, "provider.name")
    return ProviderChange(name, _provider_fields(request.provider, PROVIDER_FIELDS))


def parse_update_provider(request: provider_pb2.UpdateProviderRequest) -> ProviderChange:
    name = parse_provider_name(request.provider.name, "provider.name")
    paths = set(request.update_mask.paths) or PROVIDER_FIELDS
    unknown = sorted(paths - PROVIDER_FIELDS)
    if unknown:
        raise InvalidArgument.of(
            "update_mask", f"cannot change {', '.join(unknown)}; it may name {', '.join(sorted(PROVIDER_FIELDS))}"
        )
    return ProviderChange(name, _provider_fields(request.provider, paths))


def _provider_fields(provider: provider_pb2.Provider, paths: Collection[str]) -> dict[str, Any]:
    """The stored columns for the named fields of `provider`, each checked."""
    fields: dict[str, Any] = {}
    if "target" in paths:
        fields["target"] = check_target(provider.target, "provider.target")
    if "trigger" in paths:
        fields["trigger"] = _trigger(provider.trigger, "provider.trigger")
    if "trigger_expression" in paths:
        fields["trigger_expression"] = _trigger_expression(
            provider.trigger_expression, provider.trigger, "provider.trigger_expression", "provider.trigger"
        )
    if "priority" in paths:
        fields["priority"] = provider.priority
    if "timeout" in paths:
        timeout_ms = provider.timeout.ToMilliseconds() if provider.HasField("timeout") else DEFAULT_PROVIDER_TIMEOUT_MS
        fields["timeout_ms"] = check_provider_timeout(timeout_ms, "provider.timeout")
    if "max_tokens" in paths:
        fields["max_tokens"] = check_max_tokens(provider.max_tokens, "provider.max_tokens")
    if "enabled" in paths:
        fields["enabled"] = provider.enabled if provider.HasField("enabled") else True
    if "tls" in paths:
        tls = provider.tls
        if (tls.client_cert_pem == "") != (tls.client_key_pem == ""):
            raise InvalidArgument.of("provider.tls", "client_cert_pem and client_key_pem go together")
        fields.update(
            tls=provider.HasField("tls"),
            tls_ca=check_pem(tls.ca_pem, "provider.tls.ca_pem", "CERTIFICATE"),
            tls_cert=check_pem(tls.client_cert_pem, "provider.tls.client_cert_pem", "CERTIFICATE"),
            tls_key=check_pem(tls.client_key_pem, "provider.tls.client_key_pem", "PRIVATE KEY"),
            tls_server_name=check_server_name(tls.server_name, "provider.tls.server_name"),
        )
    if "credential" in paths:
        header, value = ("", "")
        if provider.HasField("credential"):
            header, value = check_credential(
                provider.credential.header, provider.credential.value, "provider.credential"
            )
        fields.update(credential_header=header, credential_value=value)
    return fields
