"""Translation between the wire (protos) and the domain, with the request checks that go with it."""

from __future__ import annotations

import base64
import hashlib
import json
import math
import re
from collections.abc import Callable, Sequence
from typing import Any

from contextfold.v1 import conversation_pb2, injection_pb2, memory_pb2
from google.protobuf import json_format, struct_pb2

from ..customize.expressions import check_expression
from ..customize.templates import check_template
from ..engine.conversation import InjectedRef, Role, Turn
from ..engine.format import MemoryFormat
from ..engine.injection import InjectionOutcome
from ..engine.memory import DEFAULT_MAX_ENTRIES, MemoryRequest, SkipReason
from ..engine.region import PlannedBlock
from ..engine.trigger import Trigger
from ..errors import FieldViolation, InvalidArgument
from ..memory.store import MemoryRecord, Scope, StoreRecord, is_memory_id

MAX_ENTRIES_LIMIT = 100
DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 1000
# A conversation longer than this is not one a model takes in a single call.
MAX_MESSAGES = 2000

# Store names are shown to the model in the `source` attribute, where they are
# escaped; any printable text is allowed, so long as it has no edge spaces.
_STORE_NAME = re.compile(r"(?=\S)[^\x00-\x1f\x7f]{1,63}(?<=\S)")
_SCOPE_VALUE = re.compile(r"[^\x00-\x1f\x7f]{0,128}")

_ROLES = {conversation_pb2.ROLE_USER: Role.USER, conversation_pb2.ROLE_ASSISTANT: Role.ASSISTANT}
_TRIGGERS = {
    injection_pb2.TRIGGER_UNSPECIFIED: Trigger.USER_TURN,
    injection_pb2.TRIGGER_USER_TURN: Trigger.USER_TURN,
    injection_pb2.TRIGGER_EVERY_TURN: Trigger.EVERY_TURN,
}
_SKIP_REASONS = {
    SkipReason.NOT_TRIGGERED: injection_pb2.SKIP_REASON_NOT_TRIGGERED,
    SkipReason.NO_QUERY: injection_pb2.SKIP_REASON_NO_QUERY,
    SkipReason.NO_USER_MESSAGE: injection_pb2.SKIP_REASON_NO_USER_MESSAGE,
    SkipReason.NO_ENTRIES: injection_pb2.SKIP_REASON_NO_ENTRIES,
    SkipReason.ALREADY_INJECTED: injection_pb2.SKIP_REASON_ALREADY_INJECTED,
    SkipReason.EMPTY_TEXT: injection_pb2.SKIP_REASON_EMPTY_TEXT,
    SkipReason.FAILED: injection_pb2.SKIP_REASON_FAILED,
    SkipReason.DISABLED: injection_pb2.SKIP_REASON_DISABLED,
    SkipReason.TIMEOUT: injection_pb2.SKIP_REASON_TIMEOUT,
    SkipReason.OVER_BUDGET: injection_pb2.SKIP_REASON_OVER_BUDGET,
}


# Conversation


def turns_from_messages(messages: Sequence[conversation_pb2.Message]) -> list[Turn]:
    """The engine's view of the conversation. Rejects what no agent would send."""
    if len(messages) > MAX_MESSAGES:
        raise InvalidArgument.of("messages", f"holds {len(messages)} messages; the limit is {MAX_MESSAGES}")
    violations: list[FieldViolation] = []
    turns: list[Turn] = []
    for index, message in enumerate(messages):
        role = _ROLES.get(message.role)
        if role is None:
            violations.append(FieldViolation(f"messages[{index}].role", "must be ROLE_USER or ROLE_ASSISTANT"))
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
                injected.append(
                    InjectedRef(block.injected.source, tuple(block.injected.entry_ids), tuple(block.injected.sources))
                )
        turns.append(Turn(role, tuple(texts), has_tool_result, tuple(injected)))
    if violations:
        raise InvalidArgument(*violations)
    return turns


def trigger_from_proto(value: int, field: str) -> Trigger:
    trigger = _TRIGGERS.get(value)
    if trigger is None:
        raise InvalidArgument.of(field, f"unknown trigger value {value}")
    return trigger


def trigger_to_proto(trigger: Trigger) -> int:
    return injection_pb2.TRIGGER_EVERY_TURN if trigger is Trigger.EVERY_TURN else injection_pb2.TRIGGER_USER_TURN


def check_max_tokens(value: int, field: str) -> int:
    if value < 0:
        raise InvalidArgument.of(field, f"must not be negative, got {value}")
    return value


_FORMATS = {
    injection_pb2.FORMAT_UNSPECIFIED: MemoryFormat.XML,
    injection_pb2.FORMAT_XML: MemoryFormat.XML,
    injection_pb2.FORMAT_BULLETS: MemoryFormat.BULLETS,
    injection_pb2.FORMAT_MARKDOWN: MemoryFormat.MARKDOWN,
}


def trigger_expression_from_proto(expression: str, trigger: int, field: str, trigger_field: str) -> str:
    """A CEL trigger, checked; it replaces the named trigger, so the two cannot both be set."""
    if expression and trigger != injection_pb2.TRIGGER_UNSPECIFIED:
        raise InvalidArgument.of(field, f"replaces {trigger_field}; set one of them, not both")
    return check_expression(expression, "trigger", field) if expression else ""


def memory_request_from_proto(request: injection_pb2.InjectRequest) -> MemoryRequest:
    options = request.memory
    trigger = trigger_from_proto(request.trigger, "trigger")
    trigger_expression = trigger_expression_from_proto(
        request.trigger_expression, request.trigger, "trigger_expression", "trigger"
    )
    if options.query_expression and options.query:
        raise InvalidArgument.of("memory.query_expression", "replaces memory.query; set one of them, not both")
    if options.query_expression:
        check_expression(options.query_expression, "query", "memory.query_expression")
    memory_format = _FORMATS.get(options.format)
    if memory_format is None:
        raise InvalidArgument.of("memory.format", f"unknown format value {options.format}")
    if options.format_template:
        if options.format != injection_pb2.FORMAT_UNSPECIFIED:
            raise InvalidArgument.of("memory.format_template", "replaces memory.format; set one of them, not both")
        check_template(options.format_template, "memory.format_template")
    max_entries = options.max_entries if options.HasField("max_entries") else DEFAULT_MAX_ENTRIES
    if not 0 <= max_entries <= MAX_ENTRIES_LIMIT:
        raise InvalidArgument.of("memory.max_entries", f"must be from 0 to {MAX_ENTRIES_LIMIT}, got {max_entries}")
    min_score = check_min_score(options, "memory.min_score")
    check_vector(options.query_vector, "memory.query_vector")
    check_store_names(options.stores, "memory.stores")
    return MemoryRequest(
        trigger=trigger,
        max_entries=max_entries,
        query=options.query,
        query_vector=tuple(options.query_vector),
        stores=tuple(dict.fromkeys(options.stores)),
        min_score=min_score,
        priority=options.priority,
        max_tokens=check_max_tokens(options.max_tokens, "memory.max_tokens"),
        trigger_expression=trigger_expression,
        query_expression=options.query_expression,
        format=memory_format,
        format_template=options.format_template,
    )


def injected_block(block: PlannedBlock) -> conversation_pb2.ContentBlock:
    return conversation_pb2.ContentBlock(
        injected=conversation_pb2.InjectedBlock(
            source=block.source, text=block.text, entry_ids=block.entry_ids, sources=block.sources
        )
    )


def _skip_reason(reason: SkipReason | None) -> int:
    return _SKIP_REASONS[reason] if reason else injection_pb2.SKIP_REASON_UNSPECIFIED


def report_to_proto(outcome: InjectionOutcome) -> injection_pb2.InjectionReport:
    memory = outcome.memory
    report = injection_pb2.InjectionReport(
        injected=bool(memory.entries),
        skip_reason=_skip_reason(memory.skip_reason),
        detail=memory.detail,
        query=memory.query,
        target_message_index=outcome.target_index if outcome.blocks else -1,
        entries=[injection_pb2.InjectedEntry(id=e.id, store=e.store, score=e.score) for e in memory.entries],
        total_tokens=outcome.total_tokens,
    )
    for stage, seconds in outcome.durations.items():
        report.stage_durations[stage].FromNanoseconds(int(seconds * 1e9))
    for source in outcome.sources:
        entry = report.sources.add(
            source=source.source,
            injected=source.injected,
            skip_reason=_skip_reason(source.skip_reason),
            detail=source.detail,
            priority=source.priority,
            tokens=source.tokens,
        )
        entry.duration.FromNanoseconds(int(source.duration * 1e9))
    return report


# Checks shared by the RPCs


def check_store_name(name: str, field: str) -> str:
    if not _STORE_NAME.fullmatch(name):
        raise InvalidArgument.of(
            field,
            "must be 1 to 63 printable characters, not starting or ending with a space"
            + (f", got {name!r}" if name else ", got nothing"),
        )
    return name


def check_store_names(names: Sequence[str], field: str) -> None:
    for index, name in enumerate(names):
        check_store_name(name, f"{field}[{index}]")


def check_memory_id(memory_id: str, field: str) -> str:
    if not is_memory_id(memory_id):
        raise InvalidArgument.of(field, "must be 1 to 128 printable ASCII characters without spaces")
    return memory_id


def check_vector(vector: Sequence[float], field: str) -> None:
    # Protobuf floats are 32-bit, so a sum of finite ones cannot overflow: it is finite
    # exactly when every element is (an inf or a NaN carries through; +inf and -inf make NaN).
    if vector and not math.isfinite(sum(vector)):
        raise InvalidArgument.of(field, "must hold finite numbers only")
    if vector and not any(vector):
        raise InvalidArgument.of(field, "must not be all zeros: it has no direction to compare")


def check_min_score(message, field: str) -> float | None:
    if not message.HasField("min_score"):
        return None
    if not -1.0 <= message.min_score <= 1.0:
        raise InvalidArgument.of(field, f"must be from -1 to 1, got {message.min_score}")
    return message.min_score


def scope_from_proto(scope: memory_pb2.Scope | memory_pb2.Memory, field: str) -> Scope:
    """The scope of a request, or of an entry to add; `field` is where it sits in the request."""
    for name in ("user_id", "agent_id", "session_id"):
        if not _SCOPE_VALUE.fullmatch(getattr(scope, name)):
            raise InvalidArgument.of(
                f"{field}.{name}", "must be at most 128 characters, none of them control characters"
            )
    return Scope(user_id=scope.user_id, agent_id=scope.agent_id, session_id=scope.session_id)


def struct_to_dict(value: struct_pb2.Struct) -> dict[str, Any]:
    return json_format.MessageToDict(value)


# Resources


def store_to_proto(record: StoreRecord) -> memory_pb2.Store:
    store = memory_pb2.Store(
        name=record.name,
        description=record.description,
        dimension=record.dimension,
        memory_count=record.memory_count,
    )
    store.create_time.FromDatetime(record.create_time)
    return store


def memory_to_proto(record: MemoryRecord) -> memory_pb2.Memory:
    memory = memory_pb2.Memory(
        id=record.id,
        store=record.store,
        content=record.content,
        user_id=record.scope.user_id,
        agent_id=record.scope.agent_id,
        session_id=record.scope.session_id,
    )
    memory.metadata.update(record.metadata)
    memory.create_time.FromDatetime(record.create_time)
    return memory


# Pagination (AIP-158): a token is bound to the request it came from.


def page_size(requested: int, field: str = "page_size") -> int:
    if requested < 0:
        raise InvalidArgument.of(field, f"must not be negative, got {requested}")
    return min(requested or DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)


def _request_key(*parts: str) -> str:
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:16]


def encode_page_token(after: Any, *request_parts: str) -> str:
    payload = json.dumps({"after": after, "key": _request_key(*request_parts)})
    return base64.urlsafe_b64encode(payload.encode()).decode().rstrip("=")


def decode_page_token(token: str, is_position: Callable[[Any], bool], *request_parts: str) -> Any:
    """The position a page ended on, or None for the first page. `is_position` checks its shape:
    a token is opaque to callers, not tamper-proof, so what comes back is checked like any input."""
    if not token:
        return None
    try:
        padded = token + "=" * (-len(token) % 4)
        payload = json.loads(base64.urlsafe_b64decode(padded.encode()))
        after, key = payload["after"], payload["key"]
    except (ValueError, KeyError, TypeError) as error:
        raise InvalidArgument.of("page_token", "is not a token this service issued") from error
    if not is_position(after):
        raise InvalidArgument.of("page_token", "is not a token this service issued")
    if key != _request_key(*request_parts):
        raise InvalidArgument.of("page_token", "belongs to a request with other parameters")
    return after
