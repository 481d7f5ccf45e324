"""Memory context injection: trigger, query, search, rank, format and fold, failing open.

`inject_memory` decides what to fold into a conversation and reports why. It
returns a plan (`Fold`) rather than new messages: the caller applies it, so
every message and block that is not the fold target stays exactly as sent.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol

from .conversation import Role, Turn, injected_entry_ids, latest_index
from .entries import RetrievedEntry, rank_across_stores
from .fold import Fold, fold_into_last_user_message
from .format import format_memory_block
from .query import adaptive_query
from .trigger import Trigger, should_inject

logger = logging.getLogger(__name__)

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


@dataclass(frozen=True)
class MemoryRequest:
    """What the caller asked of memory for this injection."""

    trigger: Trigger = Trigger.USER_TURN
    max_entries: int = DEFAULT_MAX_ENTRIES
    query: str = ""
    query_vector: tuple[float, ...] = ()
    stores: tuple[str, ...] = ()
    min_score: float | None = None


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
class Outcome:
    fold: Fold | None = None
    skip_reason: SkipReason | None = None
    detail: str = ""
    query: str = ""
    entries: list[RetrievedEntry] = field(default_factory=list)
    entry_ids: tuple[str, ...] = ()
    durations: dict[str, float] = field(default_factory=dict)

    @property
    def injected(self) -> bool:
        return self.fold is not None


class _Stages:
    """Times each stage, in seconds, and the whole run."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.mark = self.started
        self.durations: dict[str, float] = {}

    def done(self, stage: str) -> None:
        now = time.perf_counter()
        self.durations[stage] = now - self.mark
        self.mark = now

    def total(self) -> dict[str, float]:
        self.durations["total"] = time.perf_counter() - self.started
        return self.durations


async def inject_memory(turns: Sequence[Turn], request: MemoryRequest, search: MemorySearch) -> Outcome:
    """Plan the memory fold for one model call. Never raises: a failure skips, with the reason."""
    stages = _Stages()
    outcome = Outcome()
    try:
        _plan(turns, request, outcome, stages)
        if outcome.skip_reason is None:
            await _search_and_fold(turns, request, search, outcome, stages)
    except Exception as error:
        logger.warning("reason=<%s> | memory injection failed | returning the messages untouched", error)
        outcome.fold = None
        outcome.entries = []
        outcome.entry_ids = ()
        outcome.skip_reason = SkipReason.FAILED
        outcome.detail = f"{type(error).__name__}: {error}"
    outcome.durations = stages.total()
    return outcome


def _plan(turns: Sequence[Turn], request: MemoryRequest, outcome: Outcome, stages: _Stages) -> None:
    """The checks that need no I/O, cheapest first, so a skip costs no search."""
    if request.max_entries == 0:
        _skip(outcome, SkipReason.DISABLED, "memory.max_entries is 0")
        return
    fired = should_inject(request.trigger, turns)
    stages.done("trigger")
    if not fired:
        _skip(outcome, SkipReason.NOT_TRIGGERED, "the last message is not a fresh user ask")
        return
    target_index = latest_index(turns, Role.USER)
    if target_index < 0:
        _skip(outcome, SkipReason.NO_USER_MESSAGE, "the conversation has no user message to fold into")
        return
    if any(ref.source == MEMORY_SOURCE for ref in turns[target_index].injected):
        _skip(outcome, SkipReason.ALREADY_INJECTED, f"message {target_index} already carries a memory block")
        return
    query = _resolve_query(turns, request)
    stages.done("query")
    if query is None:
        _skip(outcome, SkipReason.NO_QUERY, "no text to search with in the latest relevant message")
        return
    outcome.query = query


def _resolve_query(turns: Sequence[Turn], request: MemoryRequest) -> str | None:
    """The caller's query when given (blank means skip), else none when the caller's
    vector is the query, else the adaptive query."""
    if request.query:
        return request.query if request.query.strip() else None
    if request.query_vector:
        return ""
    return adaptive_query(turns)


async def _search_and_fold(
    turns: Sequence[Turn], request: MemoryRequest, search: MemorySearch, outcome: Outcome, stages: _Stages
) -> None:
    # Entries still shown in the conversation are excluded in the search itself,
    # so the model gets up to max_entries new ones rather than fewer.
    query = SearchQuery(
        text=outcome.query,
        vector=request.query_vector,
        stores=request.stores,
        limit=request.max_entries,
        min_score=request.min_score,
        exclude_ids=injected_entry_ids(turns, MEMORY_SOURCE),
    )
    result = await search(query)
    stages.done("search")
    stages.durations.update(result.durations)
    entries = rank_across_stores(
        (entry for entry in result.entries if entry.id not in query.exclude_ids), request.max_entries
    )
    if not entries:
        _skip(outcome, SkipReason.NO_ENTRIES, "the search found no entries not already in the conversation")
        return
    rendered = format_memory_block(entries)
    stages.done("format")
    if not rendered.strip():
        _skip(outcome, SkipReason.EMPTY_TEXT, "the rendered text is blank")
        return
    outcome.fold = fold_into_last_user_message(turns, rendered)
    outcome.entries = entries
    outcome.entry_ids = tuple(entry.id for entry in entries)
    stages.done("fold")


def _skip(outcome: Outcome, reason: SkipReason, detail: str) -> None:
    outcome.skip_reason = reason
    outcome.detail = detail
