"""Translation between the wire (protos) and the domain.

Requests become domain values only through the checks in `checks.py`, so a
value that reaches the engine or a store has passed them; domain results
become response messages.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from contextfold.v1 import conversation_pb2, injection_pb2, memory_pb2, provider_pb2
from google.protobuf import json_format, struct_pb2
from google.protobuf.message import Message

from ..engine.conversation import InjectedRef, Role, Turn
from ..engine.format import MemoryFormat
from ..engine.gate import SkipReason
from ..engine.injection import InjectionOutcome
from ..engine.memory import DEFAULT_MAX_ENTRIES, MEMORY_SOURCE, MemoryRequest
from ..engine.ranking import Ranking
from ..engine.region import COALESCED_SOURCE, PlannedBlock
from ..engine.trigger import Trigger
from ..errors import FieldViolation, InvalidArgument
from ..memory.store import MemoryRecord, NewMemory, Scope, StoreRecord
from ..providers.registry import ProviderRecord
from .checks import (
    MAX_AGENT_FIELD_CHARS,
    MAX_APP_STATE_BYTES,
    MAX_ENTRIES_LIMIT,
    MAX_MESSAGES,
    MAX_METADATA_BYTES,
    check_content,
    check_content_blocks,
    check_count,
    check_credential,
    check_customization,
    check_max_entries,
    check_max_tokens,
    check_memory_id,
    check_min_score,
    check_pem,
    check_provider_timeout,
    check_query,
    check_scope_value,
    check_server_name,
    check_store_names,
    check_struct,
    check_target,
    check_text,
    check_vector,
    one_of,
)
from .filtering import filter_from_proto

# Sources whose names are contextfold's own: no provider may take one.
RESERVED_SOURCES = (MEMORY_SOURCE, COALESCED_SOURCE)
# A store's default time-to-live: at most ten years.
MAX_TTL_SECONDS = 3650 * 86400
DEFAULT_PROVIDER_TIMEOUT_MS = 1000

T = TypeVar("T")

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
_SKIP_REASONS = {reason: injection_pb2.SkipReason.Value(f"SKIP_REASON_{reason.name}") for reason in SkipReason}


# Conversation and injection


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
                if len(block.injected.entry_ids) > MAX_ENTRIES_LIMIT:
                    violations.append(
                        FieldViolation(
                            f"messages[{index}].content[{position}].injected.entry_ids",
                            f"holds {len(block.injected.entry_ids)} ids; a block holds at most {MAX_ENTRIES_LIMIT}",
                        )
                    )
                injected.append(
                    InjectedRef(
                        block.injected.source,
                        tuple(block.injected.entry_ids),
                        tuple(block.injected.sources),
                        block.injected.text,
                    )
                )
        turns.append(Turn(role, tuple(texts), has_tool_result, tuple(injected)))
    if violations:
        raise InvalidArgument(*violations)
    return turns


def roles_from_proto(values: Sequence[int], field: str) -> set[Role]:
    """The roles named at `field` (a repeated Role), each a user's or an assistant's."""
    roles = set()
    for index, value in enumerate(values):
        if value not in _ROLES:
            raise InvalidArgument.of(f"{field}[{index}]", _ROLE_EXPECTED)
        roles.add(_ROLES[value])
    return roles


def _enum_value(table: Mapping[int, T], value: int, field: str, what: str) -> T:
    """What an enum's number stands for; INVALID_ARGUMENT naming the field for a number it does not know."""
    if value not in table:
        raise InvalidArgument.of(field, f"unknown {what} value {value}")
    return table[value]


def trigger_from_proto(value: int, field: str) -> Trigger:
    return _enum_value(_TRIGGERS, value, field, "trigger")


def trigger_to_proto(trigger: Trigger) -> int:
    return injection_pb2.TRIGGER_EVERY_TURN if trigger is Trigger.EVERY_TURN else injection_pb2.TRIGGER_USER_TURN


def trigger_expression_from_proto(expression: str, trigger: int, field: str, trigger_field: str) -> str:
    """A CEL trigger, within its length (`check_compiles` compiles it); it replaces the named
    trigger, so the two cannot both be set."""
    one_of(field, trigger_field, bool(expression) and trigger != injection_pb2.TRIGGER_UNSPECIFIED)
    return check_customization("trigger", expression, field)


def memory_request_from_proto(request: injection_pb2.InjectRequest) -> MemoryRequest:
    options = request.memory
    trigger = trigger_from_proto(request.trigger, "trigger")
    trigger_expression = trigger_expression_from_proto(
        request.trigger_expression, request.trigger, "trigger_expression", "trigger"
    )
    one_of("memory.query_expression", "memory.query", bool(options.query_expression and options.query))
    check_customization("query", options.query_expression, "memory.query_expression")
    memory_format = _enum_value(_FORMATS, options.format, "memory.format", "format")
    if options.format_template:
        one_of("memory.format_template", "memory.format", options.format != injection_pb2.FORMAT_UNSPECIFIED)
        check_customization("format", options.format_template, "memory.format_template")
    max_entries = options.max_entries if options.HasField("max_entries") else DEFAULT_MAX_ENTRIES
    check_query(options.query, "memory.query")
    check_vector(options.query_vector, "memory.query_vector")
    check_store_names(options.stores, "memory.stores")
    return MemoryRequest(
        trigger=trigger,
        max_entries=check_max_entries(max_entries, "memory.max_entries"),
        query=options.query,
        query_vector=tuple(options.query_vector),
        stores=tuple(dict.fromkeys(options.stores)),
        min_score=check_min_score(options, "memory.min_score"),
        priority=options.priority,
        max_tokens=check_max_tokens(options.max_tokens, "memory.max_tokens"),
        trigger_expression=trigger_expression,
        query_expression=options.query_expression,
        format=memory_format,
        format_template=options.format_template,
        ranking=ranking_from_proto(options.ranking, "memory.ranking"),
        filter=filter_from_proto(options.filter, "memory.filter", options.HasField("filter")),
    )


def check_inject_context(request: injection_pb2.InjectRequest) -> None:
    """What an Inject passes on to expressions and providers: its app state and its agent."""
    check_struct(request.app_state, "app_state", MAX_APP_STATE_BYTES)
    check_text(request.agent.id, "agent.id", MAX_AGENT_FIELD_CHARS, multiline=False)
    check_text(request.agent.name, "agent.name", MAX_AGENT_FIELD_CHARS, multiline=False)


def injected_block(block: PlannedBlock) -> conversation_pb2.ContentBlock:
    return conversation_pb2.ContentBlock(
        injected=conversation_pb2.InjectedBlock(
            source=block.source, text=block.text, entry_ids=block.entry_ids, sources=block.sources
        )
    )


def _skip_reason(reason: SkipReason | None) -> int:
    return _SKIP_REASONS[reason] if reason else injection_pb2.SKIP_REASON_UNSPECIFIED


def report_to_proto(outcome: InjectionOutcome, reveal: bool = False) -> injection_pb2.InjectionReport:
    """The report; its top-level fields are memory's outcome, read here and nowhere else. With
    `reveal` (an admin asks), a source's detail is the fuller story where there is one."""
    memory = outcome.memory
    report = injection_pb2.InjectionReport(
        injected=memory.injected,
        skip_reason=_skip_reason(memory.skip_reason),
        detail=memory.detail,
        query=memory.query,
        target_message_index=outcome.target_index if outcome.blocks else -1,
        entries=[injection_pb2.InjectedEntry(id=e.id, store=e.store, score=e.score) for e in memory.entries],
        total_tokens=outcome.total_tokens,
        ranking=ranking_to_proto(memory.ranking),
    )
    for stage, seconds in outcome.durations.items():
        report.stage_durations[stage].FromNanoseconds(int(seconds * 1e9))
    for source in outcome.sources:
        entry = report.sources.add(
            source=source.source,
            injected=source.injected,
            skip_reason=_skip_reason(source.skip_reason),
            detail=source.private_detail if reveal and source.private_detail else source.detail,
            priority=source.priority,
            tokens=source.tokens,
        )
        entry.duration.FromNanoseconds(int(source.duration * 1e9))
    return report


# Memory

_RANKINGS = {
    memory_pb2.RANKING_SIMILARITY: Ranking.SIMILARITY,
    memory_pb2.RANKING_STORE_AWARE: Ranking.STORE_AWARE,
    memory_pb2.RANKING_HYBRID: Ranking.HYBRID,
    memory_pb2.RANKING_RERANK: Ranking.RERANK,
}
_RANKINGS_TO_PROTO = {ranking: value for value, ranking in _RANKINGS.items()}


def ranking_from_proto(value: int, field: str) -> Ranking | None:
    """The ranking asked for; None (the server's default) for RANKING_UNSPECIFIED."""
    if value == memory_pb2.RANKING_UNSPECIFIED:
        return None
    return _enum_value(_RANKINGS, value, field, "ranking")


def ranking_to_proto(ranking: Ranking | None) -> memory_pb2.Ranking.ValueType:
    return memory_pb2.RANKING_UNSPECIFIED if ranking is None else _RANKINGS_TO_PROTO[ranking]


def scope_from_proto(scope: memory_pb2.Scope | memory_pb2.Memory, field: str) -> Scope:
    """The scope of a request, or of an entry to add; `field` is where it sits in the request."""
    return Scope(
        user_id=check_scope_value(scope.user_id, f"{field}.user_id"),
        agent_id=check_scope_value(scope.agent_id, f"{field}.agent_id"),
        session_id=check_scope_value(scope.session_id, f"{field}.session_id"),
    )


def struct_to_dict(value: struct_pb2.Struct) -> dict[str, Any]:
    return json_format.MessageToDict(value)


def new_memories_from_proto(memories: Sequence[memory_pb2.Memory]) -> list[NewMemory]:
    """The entries to add, each checked; every bad field of every entry is named at once."""
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
        field = f"memories[{index}]"
        collect(check_content, memory.content, f"{field}.content")
        checked = collect(check_struct, memory.metadata, f"{field}.metadata", MAX_METADATA_BYTES)
        metadata = struct_to_dict(checked) if checked is not None else {}
        scope = collect(scope_from_proto, memory, field)
        if memory.id:
            collect(check_memory_id, memory.id, f"{field}.id")
            if memory.id in seen:
                violations.append(FieldViolation(f"{field}.id", f"repeats the id of memories[{seen[memory.id]}]"))
            seen.setdefault(memory.id, index)
        collect(check_vector, memory.vector, f"{field}.vector")
        expire_time = collect(time_from_proto, memory, "expire_time", f"{field}.expire_time")
        new.append(NewMemory(memory.content, tuple(memory.vector), memory.id, metadata, scope or Scope(), expire_time))
    if violations:
        raise InvalidArgument(*violations)
    return new


def time_from_proto(message: Message, name: str, field: str) -> datetime | None:
    """The time in `message`'s field `name`, None when unset; INVALID_ARGUMENT when it is no time
    (Postgres keeps years 1 to 9999 here as protobuf does)."""
    if not message.HasField(name):
        return None
    try:
        return getattr(message, name).ToDatetime(tzinfo=UTC)
    except (ValueError, OverflowError) as error:
        raise InvalidArgument.of(field, f"is not a time: {error}") from None


def ttl_from_proto(store: memory_pb2.Store, field: str) -> timedelta | None:
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


def store_to_proto(record: StoreRecord) -> memory_pb2.Store:
    store = memory_pb2.Store(
        name=record.name,
        description=record.description,
        dimension=record.dimension,
        memory_count=record.memory_count,
    )
    store.create_time.FromDatetime(record.create_time)
    if record.default_ttl is not None:
        store.default_ttl.FromTimedelta(record.default_ttl)
    return store


def memory_to_proto(record: MemoryRecord, vector: Sequence[float] = ()) -> memory_pb2.Memory:
    """The entry as responses show it; `vector` only where it is output (ExportMemories)."""
    memory = memory_pb2.Memory(
        id=record.id,
        store=record.store,
        content=record.content,
        user_id=record.scope.user_id,
        agent_id=record.scope.agent_id,
        session_id=record.scope.session_id,
        etag=record.etag,
        vector=vector,
    )
    memory.metadata.update(record.metadata)
    memory.create_time.FromDatetime(record.create_time)
    memory.update_time.FromDatetime(record.update_time or record.create_time)
    if record.expire_time is not None:
        memory.expire_time.FromDatetime(record.expire_time)
    return memory


# Providers

PROVIDER_FIELDS = frozenset(
    {"target", "trigger", "trigger_expression", "priority", "timeout", "max_tokens", "enabled", "tls", "credential"}
)


def provider_fields_from_proto(provider: provider_pb2.Provider, paths: Collection[str]) -> dict[str, Any]:
    """The stored columns for the named fields of `provider`, each checked."""
    fields: dict[str, Any] = {}
    if "target" in paths:
        fields["target"] = check_target(provider.target, "provider.target")
    if "trigger" in paths:
        fields["trigger"] = trigger_from_proto(provider.trigger, "provider.trigger")
    if "trigger_expression" in paths:
        fields["trigger_expression"] = trigger_expression_from_proto(
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


def provider_to_proto(record: ProviderRecord) -> provider_pb2.Provider:
    provider = provider_pb2.Provider(
        name=record.name,
        target=record.target,
        trigger=trigger_to_proto(record.trigger),
        trigger_expression=record.trigger_expression,
        priority=record.priority,
        max_tokens=record.max_tokens,
        enabled=record.enabled,
    )
    if record.tls:
        # Never the client key.
        provider.tls.MergeFrom(
            provider_pb2.ProviderTls(
                ca_pem=record.tls_ca, client_cert_pem=record.tls_cert, server_name=record.tls_server_name
            )
        )
        provider.tls.SetInParent()
    if record.credential_header:
        # The header's name, never its value.
        provider.credential.header = record.credential_header
    provider.timeout.FromMilliseconds(record.timeout_ms)
    provider.create_time.FromDatetime(record.create_time)
    provider.update_time.FromDatetime(record.update_time)
    return provider
