"""Request builders shared by the sync and asyncio clients."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from google.protobuf import struct_pb2

from .convert import to_proto_messages
from .v1 import injection_pb2, memory_pb2, provider_pb2

ScopeLike = memory_pb2.Scope | Mapping[str, str] | None
MemoryLike = str | Mapping[str, Any] | memory_pb2.Memory

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
_TRIGGERS: dict[str, injection_pb2.Trigger] = {
    "user_turn": injection_pb2.TRIGGER_USER_TURN,
    "every_turn": injection_pb2.TRIGGER_EVERY_TURN,
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


def inject(
    messages: Iterable[Mapping[str, Any]],
    *,
    trigger: str | None = None,
    trigger_expression: str = "",
    stores: Sequence[str] = (),
    max_entries: int | None = None,
    query: str = "",
    query_vector: Sequence[float] = (),
    scope_: ScopeLike = None,
    min_score: float | None = None,
    memory_priority: int = 0,
    memory_max_tokens: int = 0,
    query_expression: str = "",
    format: str | None = None,
    format_template: str = "",
    ranking: str | None = None,
    providers: Sequence[str] = (),
    max_tokens: int = 0,
    coalesce: bool = False,
    app_state: Mapping[str, Any] | None = None,
    agent: Mapping[str, str] | None = None,
) -> injection_pb2.InjectRequest:
    if format and format not in _FORMATS:
        raise ValueError(f"unknown format {format!r}: expected one of {', '.join(_FORMATS)}")
    options = injection_pb2.MemoryOptions(
        stores=list(stores),
        query=query,
        query_vector=list(query_vector),
        scope=scope(scope_),
        priority=memory_priority,
        max_tokens=memory_max_tokens,
        query_expression=query_expression,
        format=_FORMATS[format] if format else injection_pb2.FORMAT_UNSPECIFIED,
        format_template=format_template,
        ranking=ranking_value(ranking),
    )
    if max_entries is not None:
        options.max_entries = max_entries
    if min_score is not None:
        options.min_score = min_score
    return injection_pb2.InjectRequest(
        messages=to_proto_messages(messages),
        trigger=trigger_value(trigger) if trigger else injection_pb2.TRIGGER_UNSPECIFIED,
        trigger_expression=trigger_expression,
        memory=options,
        providers=list(providers),
        max_tokens=max_tokens,
        coalesce=coalesce,
        app_state=struct(app_state),
        agent=injection_pb2.Agent(**agent) if agent else None,
    )


def new_memory(value: MemoryLike) -> memory_pb2.Memory:
    """An entry to add: plain text, a dict of `Memory` fields, or a `Memory`."""
    if isinstance(value, memory_pb2.Memory):
        return value
    if isinstance(value, str):
        return memory_pb2.Memory(content=value)
    fields = dict(value)
    metadata = struct(fields.pop("metadata", None))
    return memory_pb2.Memory(metadata=metadata, **fields)


def search(
    query: str,
    *,
    stores: Sequence[str] = (),
    max_results: int = 0,
    scope_: ScopeLike = None,
    min_score: float | None = None,
    query_vector: Sequence[float] = (),
    ranking: str | None = None,
) -> memory_pb2.SearchMemoriesRequest:
    request = memory_pb2.SearchMemoriesRequest(
        query=query,
        query_vector=list(query_vector),
        stores=list(stores),
        max_results=max_results,
        scope=scope(scope_),
        ranking=ranking_value(ranking),
    )
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
