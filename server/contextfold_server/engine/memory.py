"""Memory's part of an injection: trigger, query, search and rank.

`retrieve_memory` decides which entries memory offers for this model call, or
why it offers none. Rendering, budgets and the fold are the region's work
(`region.py`), shared with the providers.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol

from .conversation import Role, Turn, injected_entry_ids, latest_index
from .entries import RetrievedEntry, rank_across_stores
from .format import MemoryFormat
from .query import adaptive_query
from .trigger import Trigger, should_inject

MEMORY_SOURCE = "memory"

# A store ranks by embedding similarity, which is not the same as usefulness for
# this turn: five candidates give the model a choice without bloating the prompt.
DEFAULT_MAX_ENTRIES = 5


class SkipReason(Enum):
    NOT_TRIGGERED = "not_triggered"
    NO_QUERY = "no_query"
    NO_USER_MESSAGE = "no_user_message"
    NO_ENTRIES = "no_entries"
    ALREADY_INJECTED = "already_injected"
    EMPTY_TEXT = "empty_text"
    FAILED = "failed"
    DISABLED = "disabled"
    TIMEOUT = "timeout"
    OVER_BUDGET = "over_budget"


@dataclass(frozen=True)
class MemoryRequest:
    """What the caller asked of memory for this injection."""

    trigger: Trigger = Trigger.USER_TURN
    max_entries: int = DEFAULT_MAX_ENTRIES
    query: str = ""
    query_vector: tuple[float, ...] = ()
    stores: tuple[str, ...] = ()
    min_score: float | None = None
    priority: int = 0
    max_tokens: int = 0
    # The caller's customizations: a CEL trigger and query, a format or a template.
    trigger_expression: str = ""
    query_expression: str = ""
    format: MemoryFormat = MemoryFormat.XML
    format_template: str = ""


class Customizer(Protocol):
    """The port to the caller's customizations, bound to one request's context.

    Each raises an exception whose message says what went wrong; the source
    it serves is then left out, and the call goes on.
    """

    async def trigger(self, expression: str) -> bool: ...

    async def query(self, expression: str) -> str: ...

    async def render(self, template: str, entries: Sequence[RetrievedEntry]) -> str: ...


@dataclass(frozen=True)
class SearchQuery:
    text: str
    vector: tuple[float, ...]
    stores: tuple[str, ...]
    limit: int
    min_score: float | None
    exclude_ids: frozenset[str]


@dataclass
class SearchResult:
    entries: list[RetrievedEntry]
    # Sub-stages the search measured itself, e.g. `embed` and `search`.
    durations: dict[str, float] = field(default_factory=dict)


class MemorySearch(Protocol):
    """The port to memory: returns the entries most similar to the query, best first."""

    async def __call__(self, query: SearchQuery) -> SearchResult: ...


@dataclass
class MemoryOutcome:
    """The entries memory offers, best first, or why it offers none."""

    entries: list[RetrievedEntry] = field(default_factory=list)
    skip_reason: SkipReason | None = None
    detail: str = ""
    query: str = ""
    durations: dict[str, float] = field(default_factory=dict)

    def skip(self, reason: SkipReason, detail: str) -> MemoryOutcome:
        self.entries = []
        self.skip_reason = reason
        self.detail = detail
        return self


class _Stages:
    """Times each stage, in seconds."""

    def __init__(self, durations: dict[str, float]) -> None:
        self.mark = time.perf_counter()
        self.durations = durations

    def done(self, stage: str) -> None:
        now = time.perf_counter()
        self.durations[stage] = now - self.mark
        self.mark = now


async def retrieve_memory(
    turns: Sequence[Turn], request: MemoryRequest, search: MemorySearch, customizer: Customizer
) -> MemoryOutcome:
    """The entries to inject for one model call. Raises what the search or a customization raises."""
    outcome = MemoryOutcome()
    stages = _Stages(outcome.durations)
    if request.max_entries == 0:
        return outcome.skip(SkipReason.DISABLED, "memory.max_entries is 0")
    if request.trigger_expression:
        fired = await customizer.trigger(request.trigger_expression)
        reason = "the trigger expression returned false"
    else:
        fired = should_inject(request.trigger, turns)
        reason = "the last message is not a fresh user ask" if request.trigger is Trigger.USER_TURN else ""
    stages.done("trigger")
    if not fired:
        return outcome.skip(SkipReason.NOT_TRIGGERED, reason)
    target_index = latest_index(turns, Role.USER)
    if target_index < 0:
        return outcome.skip(SkipReason.NO_USER_MESSAGE, "the conversation has no user message to fold into")
    if any(ref.holds(MEMORY_SOURCE) for ref in turns[target_index].injected):
        return outcome.skip(SkipReason.ALREADY_INJECTED, f"message {target_index} already carries a memory block")
    query = await _resolve_query(turns, request, customizer)
    stages.done("query")
    if query is None:
        return outcome.skip(SkipReason.NO_QUERY, "no text to search with in the latest relevant message")
    outcome.query = query

    # Entries still shown in the conversation are excluded in the search itself,
    # so the model gets up to max_entries new ones rather than fewer.
    search_query = SearchQuery(
        text=query,
        vector=request.query_vector,
        stores=request.stores,
        limit=request.max_entries,
        min_score=request.min_score,
        exclude_ids=injected_entry_ids(turns, MEMORY_SOURCE),
    )
    result = await search(search_query)
    stages.done("search")
    outcome.durations.update(result.durations)
    outcome.entries = rank_across_stores(
        (entry for entry in result.entries if entry.id not in search_query.exclude_ids), request.max_entries
    )
    if not outcome.entries:
        return outcome.skip(SkipReason.NO_ENTRIES, "the search found no entries not already in the conversation")
    return outcome


async def _resolve_query(turns: Sequence[Turn], request: MemoryRequest, customizer: Customizer) -> str | None:
    """What the caller's query expression returns, or the caller's query (blank means skip,
    either way); else none when the caller's vector is the query; else the adaptive query."""
    if request.query_expression:
        query = await customizer.query(request.query_expression)
        return query if query.strip() else None
    if request.query:
        return request.query if request.query.strip() else None
    if request.query_vector:
        return ""
    return adaptive_query(turns)
