"""Who asks, and with what settings: read from the processor's own gRPC stream (the metadata the
operator's filter config sends, for every request or per route) and from the request's headers,
each named with one prefix, `x-contextfold-`.

The stream's metadata is the operator's and wins; a request header fills in what it leaves unset
(a route that sets `x-contextfold-user-id` from a verified token, say). Every header with the
prefix is removed before the request goes upstream, whatever it holds. The upstream's own
`authorization` is never read.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from contextfold.v1 import injection_pb2, memory_pb2

PREFIX = "x-contextfold-"
_TRIGGERS = {"user_turn": injection_pb2.TRIGGER_USER_TURN, "every_turn": injection_pb2.TRIGGER_EVERY_TURN}
_RANKINGS = {
    "similarity": memory_pb2.RANKING_SIMILARITY,
    "store_aware": memory_pb2.RANKING_STORE_AWARE,
    "hybrid": memory_pb2.RANKING_HYBRID,
    "rerank": memory_pb2.RANKING_RERANK,
}
_FORMATS = {
    "xml": injection_pb2.FORMAT_XML,
    "bullets": injection_pb2.FORMAT_BULLETS,
    "markdown": injection_pb2.FORMAT_MARKDOWN,
}
# Every setting a header may carry (after the prefix), and what it holds.
NAMES = {
    "api-key": "the contextfold API key to act with",
    "user-id": "the scope's user",
    "agent-id": "the scope's agent",
    "session-id": "the scope's session",
    "stores": "the stores to search, comma-separated (all of the tenant's when unset)",
    "max-entries": "the most entries injected (5 when unset)",
    "min-score": "the lowest score an entry may have",
    "ranking": "similarity, store_aware, hybrid or rerank",
    "trigger": "user_turn (the default) or every_turn",
    "format": "xml (the default), bullets or markdown",
    "providers": "registered context providers to ask, comma-separated",
    "max-tokens": "the most tokens injected in all",
    "remember": "a store: the request's user turns are remembered there, after the request has gone on",
    "outcome-header": "on: the answer carries `x-contextfold-outcome` (what was folded, or why not)",
}


class BadSetting(ValueError):
    """A setting that cannot be used, naming it and why; the request goes on unchanged."""


@dataclass(frozen=True)
class MeshSettings:
    api_key: str = ""
    scope: memory_pb2.Scope = field(default_factory=memory_pb2.Scope)
    memory: injection_pb2.MemoryOptions = field(default_factory=injection_pb2.MemoryOptions)
    trigger: int = injection_pb2.TRIGGER_UNSPECIFIED
    providers: tuple[str, ...] = ()
    max_tokens: int = 0
    remember: str = ""
    outcome_header: bool = False

    def inject_request(self, messages: Iterable[object]) -> injection_pb2.InjectRequest:
        memory = injection_pb2.MemoryOptions()
        memory.CopyFrom(self.memory)
        memory.scope.CopyFrom(self.scope)
        return injection_pb2.InjectRequest(
            messages=messages, trigger=self.trigger, memory=memory, providers=self.providers, max_tokens=self.max_tokens
        )


def ours(headers: Iterable[tuple[str, str]]) -> dict[str, str]:
    """The settings among `headers` (lower-cased names), without the prefix; a name sent twice is
    refused, as one value could not be told from the other."""
    found: dict[str, str] = {}
    for name, value in headers:
        if not name.startswith(PREFIX):
            continue
        key = name[len(PREFIX) :]
        if key in found:
            raise BadSetting(f"{name}: sent more than once")
        found[key] = value
    return found


def settings(stream: Mapping[str, str], request: Mapping[str, str]) -> MeshSettings:
    """The settings of one request: the stream's (the operator's), then the request's headers for
    what the stream leaves unset. An API key may also come as the stream's `authorization: Bearer`."""
    given = {**request, **stream}
    unknown = sorted(set(given) - set(NAMES))
    if unknown:
        raise BadSetting(f"{PREFIX}{unknown[0]}: not a setting (known: {', '.join(sorted(NAMES))})")
    memory = injection_pb2.MemoryOptions(stores=_listed(given.get("stores", "")))
    if "max-entries" in given:
        memory.max_entries = _whole(given, "max-entries")
    if "min-score" in given:
        memory.min_score = _number(given, "min-score")
    if "ranking" in given:
        memory.ranking = _chosen(given, "ranking", _RANKINGS)
    if "format" in given:
        memory.format = _chosen(given, "format", _FORMATS)
    return MeshSettings(
        api_key=given.get("api-key", ""),
        scope=memory_pb2.Scope(
            user_id=given.get("user-id", ""), agent_id=given.get("agent-id", ""), session_id=given.get("session-id", "")
        ),
        memory=memory,
        trigger=_chosen(given, "trigger", _TRIGGERS) if "trigger" in given else injection_pb2.TRIGGER_UNSPECIFIED,
        providers=tuple(_listed(given.get("providers", ""))),
        max_tokens=_whole(given, "max-tokens") if "max-tokens" in given else 0,
        remember=given.get("remember", "").strip(),
        outcome_header=_switch(given, "outcome-header") if "outcome-header" in given else False,
    )


def _listed(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


def _whole(given: Mapping[str, str], name: str) -> int:
    value = given[name].strip()
    if not value.isdigit() or len(value) > 9:
        raise BadSetting(f"{PREFIX}{name}: {given[name]!r} is not a whole number")
    return int(value)


def _number(given: Mapping[str, str], name: str) -> float:
    try:
        return float(given[name])
    except ValueError:
        raise BadSetting(f"{PREFIX}{name}: {given[name]!r} is not a number") from None


def _chosen(given: Mapping[str, str], name: str, table: Mapping[str, int]) -> int:
    value = given[name].strip().lower()
    if value not in table:
        raise BadSetting(f"{PREFIX}{name}: {given[name]!r} is not one of {', '.join(table)}")
    return table[value]


def _switch(given: Mapping[str, str], name: str) -> bool:
    value = given[name].strip().lower()
    if value not in ("on", "off", "true", "false"):
        raise BadSetting(f"{PREFIX}{name}: {given[name]!r} is not on or off")
    return value in ("on", "true")
