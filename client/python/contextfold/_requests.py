"""Request builders shared by the sync and asyncio clients."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Literal, TypedDict

from google.protobuf import duration_pb2, struct_pb2, timestamp_pb2

from .convert import to_proto_messages
from .v1 import injection_pb2, memory_pb2, provider_pb2

ScopeLike = memory_pb2.Scope | Mapping[str, str] | None
MemoryLike = str | Mapping[str, Any] | memory_pb2.Memory
# A `Filter`, or the same as a dict (`filter_message`).
FilterLike = memory_pb2.Filter | Mapping[str, Any] | None

_FORMATS = {
    "xml": injection_pb2.FORMAT_XML,
    "bullets": injection_pb2.FORMAT_BULLETS,
    "markdown": injection_pb2.FORMAT_MARKDOWN,
}
_RANKINGS: dict[str, memory_pb2.Ranking] = {
    "similarity": memory_pb2.RANKING_SIMILARITY,
    "store_aware": memory_pb2.RANKING_STORE_AWARE,
    "hybrid": memory_pb2.RANKING_HYBRID,
    "rerank": memory_pb2.RANKING_RERANK,
}
# The rankings' names, as options take them.
RANKINGS = tuple(_RANKINGS)
Ranking = Literal["similarity", "store_aware", "hybrid", "rerank"]
# Python's names, and the Strands SDKs' (the TypeScript plugin's options read the same).
Trigger = Literal["user_turn", "every_turn", "userTurn", "everyTurn"]
_TRIGGERS: dict[str, injection_pb2.Trigger] = {
    "user_turn": injection_pb2.TRIGGER_USER_TURN,
    "every_turn": injection_pb2.TRIGGER_EVERY_TURN,
    "userTurn": injection_pb2.TRIGGER_USER_TURN,
    "everyTurn": injection_pb2.TRIGGER_EVERY_TURN,
}


def scope(value: ScopeLike) -> memory_pb2.Scope | None:
    if value is None or isinstance(value, memory_pb2.Scope):
        return value
    return memory_pb2.Scope(**value)


def struct(value: Mapping[str, Any] | None) -> struct_pb2.Struct | None:
    if value is None:
        return None
    converted = struct_pb2.Struct()
    converted.update(value)
    return converted


def ranking_value(name: str | None) -> memory_pb2.Ranking:
    """A ranking by name (`similarity`, `store_aware`, `hybrid`, `rerank`); None is the server's default."""
    if name is None:
        return memory_pb2.RANKING_UNSPECIFIED
    if name not in _RANKINGS:
        raise ValueError(f"unknown ranking {name!r}: expected one of {', '.join(_RANKINGS)}")
    return _RANKINGS[name]


def trigger_value(name: str) -> injection_pb2.Trigger:
    if name not in _TRIGGERS:
        raise ValueError(f"unknown trigger {name!r}: expected one of {', '.join(_TRIGGERS)}")
    return _TRIGGERS[name]


class InjectSettings(TypedDict, total=False):
    """How to inject, every setting optional (the service's defaults apply to those not given):
    fields of the protos' `InjectRequest` and `MemoryOptions`, named as Python names them."""

    trigger: Trigger
    """When memory injects: "user_turn" (the default: on a fresh user ask, not a tool result) or
    "every_turn". Strands' spellings, "userTurn" and "everyTurn", are taken too."""
    trigger_expression: str
    """A CEL expression over the conversation deciding whether memory injects (not with `trigger`)."""
    max_entries: int | None
    """Entries to inject at most (default 5); 0 turns memory off."""
    query: str
    """Search with this text instead of the one derived from the conversation."""
    query_vector: Sequence[float]
    """Search with this vector instead of embedding the query."""
    min_score: float | None
    """Only entries at least this similar to the query (cosine, -1 to 1)."""
    memory_priority: int
    """Memory's place among the sources (higher first)."""
    memory_max_tokens: int
    """Memory's own token budget; 0: none."""
    query_expression: str
    """A CEL expression deriving the query from the conversation."""
    format: Literal["xml", "bullets", "markdown"]
    """How memory's block reads (default "xml", the reference's)."""
    format_template: str
    """A Jinja template rendering memory's block instead of `format`."""
    ranking: Ranking
    """How entries are ranked; the server's default (its operator's choice) when not given."""
    filter: FilterLike
    """Only entries matching this filter (see `filter_message`)."""
    providers: Sequence[str]
    """Registered providers to ask, by name; none: every enabled provider."""
    max_tokens: int
    """Token budget for everything injected; 0: none."""
    coalesce: bool
    """Fold every source into one block instead of one block each."""


class InjectOptions(InjectSettings, total=False):
    """`inject`'s keyword arguments: the settings, and what this call is for."""

    stores: Sequence[str]
    """Memory stores to search; none: every store of the query's dimension."""
    scope: ScopeLike
    """Only entries of this user, agent and session: `{"user_id": …, "agent_id": …, "session_id": …}`."""
    app_state: Mapping[str, Any]
    """The agent's application state, for expressions, templates and providers."""
    agent: Mapping[str, str]
    """The agent asking: `{"id": …, "name": …}`."""
    explain: bool
    """Say in the report why each candidate entry was injected or left out (`report.candidates`)."""
    asked_time: datetime | None
    """When the question is asked, for the days it names by when it is asked ("yesterday", "last
    week"): set it when replaying a conversation recorded earlier; the call's own time when not given."""


class SearchOptions(TypedDict, total=False):
    """`search_memories`' keyword arguments beside the query and scope, every one optional."""

    stores: Sequence[str]
    """Stores to search; none: every store of the query's dimension."""
    max_results: int
    """Results at most; 0: the service's default."""
    min_score: float | None
    """Only entries at least this similar to the query (cosine, -1 to 1)."""
    query_vector: Sequence[float]
    """Search with this vector instead of embedding the query."""
    ranking: Ranking
    """How entries are ranked; the server's default when not given."""
    filter: FilterLike
    """Only entries matching this filter (see `filter_message`)."""
    asked_time: datetime | None
    """When the question is asked, for the days it names by when it is asked (as `inject`'s)."""


def known(options: Mapping[str, Any], allowed: Any, call: str) -> None:
    """TypeError for a keyword `call` does not take, as for a function's own parameters."""
    unknown = sorted(set(options) - allowed.__optional_keys__)
    if unknown:
        raise TypeError(f"{call}() got an unexpected keyword argument {unknown[0]!r}")


def inject(messages: Iterable[Mapping[str, Any]], options: InjectOptions) -> injection_pb2.InjectRequest:
    known(options, InjectOptions, "inject")
    format = options.get("format")
    if format and format not in _FORMATS:
        raise ValueError(f"unknown format {format!r}: expected one of {', '.join(_FORMATS)}")
    memory = injection_pb2.MemoryOptions(
        stores=list(options.get("stores", ())),
        query=options.get("query", ""),
        query_vector=list(options.get("query_vector", ())),
        scope=scope(options.get("scope")),
        priority=options.get("memory_priority", 0),
        max_tokens=options.get("memory_max_tokens", 0),
        query_expression=options.get("query_expression", ""),
        format=_FORMATS[format] if format else injection_pb2.FORMAT_UNSPECIFIED,
        format_template=options.get("format_template", ""),
        ranking=ranking_value(options.get("ranking")),
        filter=filter_message(options.get("filter")),
        asked_time=timestamp(options.get("asked_time")),
    )
    max_entries, min_score = options.get("max_entries"), options.get("min_score")
    if max_entries is not None:
        memory.max_entries = max_entries
    if min_score is not None:
        memory.min_score = min_score
    trigger = options.get("trigger")
    agent = options.get("agent")
    return injection_pb2.InjectRequest(
        messages=to_proto_messages(messages),
        trigger=trigger_value(trigger) if trigger else injection_pb2.TRIGGER_UNSPECIFIED,
        trigger_expression=options.get("trigger_expression", ""),
        memory=memory,
        providers=list(options.get("providers", ())),
        max_tokens=options.get("max_tokens", 0),
        coalesce=options.get("coalesce", False),
        app_state=struct(options.get("app_state")),
        agent=injection_pb2.Agent(**agent) if agent else None,
        explain=options.get("explain", False),
    )


def new_memory(value: MemoryLike) -> memory_pb2.Memory:
    """An entry to add: plain text, a dict of `Memory` fields, or a `Memory`."""
    if isinstance(value, memory_pb2.Memory):
        return value
    if isinstance(value, str):
        return memory_pb2.Memory(content=value)
    fields = dict(value)
    metadata = struct(fields.pop("metadata", None))
    times = {name: timestamp(fields.pop(name)) for name in TIME_FIELDS if fields.get(name) is not None}
    return memory_pb2.Memory(metadata=metadata, **fields, **times)


# An entry's times: given as datetimes, and named in filters as entry fields, not metadata.
TIME_FIELDS = ("create_time", "update_time", "expire_time")


def filter_times(value: Any) -> Any:
    """A filter read from JSON, its bounds on `create_time`, `update_time` and `expire_time` (ISO 8601
    text there) as datetimes, which `filter_message` takes."""
    if isinstance(value, dict):
        return {
            key: {op: datetime.fromisoformat(v) for op, v in item.items()}
            if key in TIME_FIELDS and isinstance(item, dict)
            else filter_times(item)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [filter_times(item) for item in value]
    return value


def timestamp(value: datetime | timestamp_pb2.Timestamp | None) -> timestamp_pb2.Timestamp | None:
    """A `Timestamp` from an aware datetime (a naive one is taken as UTC); None stays None."""
    if value is None or isinstance(value, timestamp_pb2.Timestamp):
        return value
    converted = timestamp_pb2.Timestamp()
    converted.FromDatetime(value)
    return converted


_TESTS = ("eq", "in", "contains", "gt", "gte", "lt", "lte", "exists")


def filter_message(value: FilterLike) -> memory_pb2.Filter | None:
    """A `Filter` from a dict, as mem0's filters read:

    - `{"topic": "food"}`: metadata `topic` equals "food"; keys with dots are nested
      (`"place.city"`), and `metadata.` may lead (`"metadata.all"` for a key named `all`).
    - `{"rating": {"gte": 3, "lt": 5}}`, `{"lang": {"in": ["en", "pt"]}}`,
      `{"tags": {"contains": "work"}}`, `{"city": {"exists": True}}`, `{"topic": {"eq": None}}`.
    - `{"create_time": {"gte": datetime(...)}}`; `update_time`, `expire_time` alike.
    - Several keys: all must hold; `{"all": [...]}`, `{"any": [...]}`, `{"not": {...}}` combine.
    """
    if value is None or isinstance(value, memory_pb2.Filter):
        return value
    parts = [_filter_part(key, item) for key, item in value.items()]
    if not parts:
        raise ValueError("an empty filter: give at least one condition")
    return parts[0] if len(parts) == 1 else memory_pb2.Filter(all=memory_pb2.FilterList(filters=parts))


def _filter_required(value: Any) -> memory_pb2.Filter:
    converted = filter_message(value)
    if converted is None:
        raise ValueError("a combined filter is None")
    return converted


def _filter_part(key: str, value: Any) -> memory_pb2.Filter:
    if key in ("all", "any"):
        filters = [_filter_required(item) for item in value]
        return memory_pb2.Filter(**{key: memory_pb2.FilterList(filters=filters)})
    if key == "not":
        return memory_pb2.Filter(**{"not": _filter_required(value)})
    field = key if key in TIME_FIELDS or key.startswith("metadata.") else f"metadata.{key}"
    tests = value if isinstance(value, Mapping) and value and all(k in _TESTS for k in value) else {"eq": value}
    conditions: list[memory_pb2.Filter] = []
    bounds = {name: tests[name] for name in ("gt", "gte", "lt", "lte") if name in tests}
    if bounds:
        conditions.append(_field(field, range=memory_pb2.Range(**{n: _bound(v) for n, v in bounds.items()})))
    if "eq" in tests:
        conditions.append(_field(field, equals=_value(tests["eq"])))
    if "in" in tests:
        conditions.append(_field(field, **{"in": struct_pb2.ListValue(values=[_value(v) for v in tests["in"]])}))
    if "contains" in tests:
        conditions.append(_field(field, contains=_value(tests["contains"])))
    if "exists" in tests:
        conditions.append(_field(field, exists=bool(tests["exists"])))
    if len(conditions) == 1:
        return conditions[0]
    return memory_pb2.Filter(all=memory_pb2.FilterList(filters=conditions))


def _field(field: str, **test: Any) -> memory_pb2.Filter:
    return memory_pb2.Filter(field=memory_pb2.FieldFilter(field=field, **test))


def _bound(value: Any) -> memory_pb2.Bound:
    if isinstance(value, datetime):
        return memory_pb2.Bound(time=timestamp(value))
    return memory_pb2.Bound(number=value)


def _value(value: Any) -> struct_pb2.Value:
    if isinstance(value, list | tuple | dict):
        raise ValueError(f"a filter compares with a string, number, bool or None, not {type(value).__name__}")
    converted = struct_pb2.Value()
    if value is None:
        converted.null_value = struct_pb2.NULL_VALUE
    elif isinstance(value, bool):
        converted.bool_value = value
    elif isinstance(value, int | float):
        converted.number_value = value
    else:
        converted.string_value = str(value)
    return converted


def duration(value: float | timedelta | None) -> duration_pb2.Duration | None:
    """A `Duration` from seconds or a timedelta; None stays None."""
    if value is None:
        return None
    converted = duration_pb2.Duration()
    converted.FromTimedelta(value if isinstance(value, timedelta) else timedelta(seconds=value))
    return converted


def search(query: str, scope_: ScopeLike, options: SearchOptions) -> memory_pb2.SearchMemoriesRequest:
    known(options, SearchOptions, "search_memories")
    request = memory_pb2.SearchMemoriesRequest(
        query=query,
        query_vector=list(options.get("query_vector", ())),
        stores=list(options.get("stores", ())),
        max_results=options.get("max_results", 0),
        scope=scope(scope_),
        ranking=ranking_value(options.get("ranking")),
        filter=filter_message(options.get("filter")),
        asked_time=timestamp(options.get("asked_time")),
    )
    min_score = options.get("min_score")
    if min_score is not None:
        request.min_score = min_score
    return request


def provider(
    name: str,
    *,
    target: str | None = None,
    trigger: str | None = None,
    trigger_expression: str | None = None,
    priority: int | None = None,
    timeout: float | None = None,
    max_tokens: int | None = None,
    enabled: bool | None = None,
    tls: Mapping[str, str] | None = None,
    credential: Mapping[str, str] | None = None,
) -> provider_pb2.Provider:
    """A `Provider` with the settings given; those left out stay unset. `tls`: `ca_pem`,
    `client_cert_pem`, `client_key_pem`, `server_name` (an empty mapping: TLS with the system's
    roots); `credential`: `header` and `value`."""
    message = provider_pb2.Provider(name=name, target=target or "", priority=priority or 0, max_tokens=max_tokens or 0)
    if trigger is not None:
        message.trigger = trigger_value(trigger)
    if trigger_expression is not None:
        message.trigger_expression = trigger_expression
    if timeout is not None:
        message.timeout.FromNanoseconds(int(timeout * 1e9))
    if enabled is not None:
        message.enabled = enabled
    if tls is not None:
        message.tls.SetInParent()
        message.tls.MergeFrom(provider_pb2.ProviderTls(**tls))
    if credential is not None:
        message.credential.MergeFrom(provider_pb2.ProviderCredential(**credential))
    return message
