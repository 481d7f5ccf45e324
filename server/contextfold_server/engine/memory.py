"""Memory's part of an injection, once the gate has let it through: query, search and rank.

`retrieve_memory` decides which entries memory offers for this model call, or
why it offers none. Whether memory is asked at all is the gate's decision
(`gate.py`); rendering, budgets and the fold are the region's (`region.py`),
shared with the providers.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, Protocol, TypeVar

from .conversation import Turn, injected_entry_ids, shown_texts
from .entries import RetrievedEntry
from .explain import Considered, Verdict, excluded
from .filters import Filter
from .format import MemoryFormat, escape_xml_text
from .gate import Customizer, Gate, Skipped, SkipReason
from .outcome import SourceFailed, SourceOutcome
from .query import adaptive_query
from .ranking import Ranking
from .trigger import Trigger

MEMORY_SOURCE = "memory"
# The most entries more a search asks for, to leave out those a block shows by their text alone.
MAX_SHOWN_LINES = 50
# How many characters of blocks shown by their text alone the entries found may be looked for in on the event loop (a
# millisecond or two). More is looked through on a thread: an agent may send 3 MB of them back (a mesh client's whole
# history, in another format than the default), which 150 entries took the loop 0.3 s to be looked for in.
SHOWN_ON_THE_LOOP = 10_000_000

# Where work too large for the event loop is done: `work(*args)`, awaited (the server's is the worker's thread, in the
# caller's tenant's turns: `turns.InTurns`).
OffTheLoop = Callable[..., Awaitable[Any]]

Found = TypeVar("Found")

# A store ranks by embedding similarity, which is not the same as usefulness for
# this turn: five candidates give the model a choice without bloating the prompt.
DEFAULT_MAX_ENTRIES = 5


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
    # None: the server's default ranking.
    ranking: Ranking | None = None
    # Only entries matching it.
    filter: Filter | None = None
    # When the question is asked, for the days it names by when it is asked ("yesterday"); None: now.
    asked_time: datetime | None = None
    # Say why each candidate was injected or left out (`explain.py`).
    explain: bool = False

    @property
    def gate(self) -> Gate:
        return Gate(
            MEMORY_SOURCE,
            self.trigger,
            self.trigger_expression,
            off="memory.max_entries is 0" if self.max_entries == 0 else "",
        )


@dataclass(frozen=True)
class SearchQuery:
    text: str
    vector: tuple[float, ...]
    stores: tuple[str, ...]
    limit: int
    min_score: float | None
    exclude_ids: frozenset[str]
    # None: the server's default.
    ranking: Ranking | None = None
    # Only entries matching it.
    filter: Filter | None = None
    # Weigh out loud: the result says what the ranking made of each candidate.
    explain: bool = False
    # Leave out what the default ranking judges not relevant enough (Inject asks; a `min_score` replaces it).
    gate: bool = False
    # When the question is asked, for the days it names by when it is asked ("yesterday"); None: now.
    asked_time: datetime | None = None


@dataclass
class SearchResult(Generic[Found]):
    """A search's entries, best first (`RetrievedEntry` at the engine's port; the records themselves for
    SearchMemories), and what the report says of how they were found."""

    entries: list[Found]
    # Sub-stages the search measured itself, e.g. `embed` and `search`.
    durations: dict[str, float] = field(default_factory=dict)
    # Stores named but not searched, each with why (it does not exist, its dimension differs).
    left_out: tuple[str, ...] = ()
    # What else the report should say, e.g. that the reranker failed and why.
    notes: tuple[str, ...] = ()
    # The strategy that ranked `entries`, and why it is not the one asked for, when it is not.
    ranking: Ranking | None = None
    # Explaining: the candidates weighed, best first, with their signals (`explain.py`).
    considered: list[Considered] = field(default_factory=list)
    # Why nothing was found relevant enough, when the gate left out every candidate.
    silence: str = ""


class MemorySearch(Protocol):
    """The port to memory: returns the entries to offer for the query, ranked, best first."""

    async def __call__(self, query: SearchQuery) -> SearchResult[RetrievedEntry]: ...


class Stages:
    """Times each stage of one call, in seconds, into `durations`."""

    def __init__(self, durations: dict[str, float]) -> None:
        self.mark = time.perf_counter()
        self.durations = durations

    def done(self, stage: str) -> None:
        now = time.perf_counter()
        self.durations[stage] = now - self.mark
        self.mark = now


async def retrieve_memory(
    turns: Sequence[Turn],
    request: MemoryRequest,
    search: MemorySearch,
    customizer: Customizer,
    outcome: SourceOutcome,
    stages: Stages,
    off_the_loop: OffTheLoop = asyncio.to_thread,
) -> tuple[RetrievedEntry, ...]:
    """The entries to offer, best first. The query goes on `outcome` as soon as it is known, so a
    skip still reports it. Raises `Skipped` when there is nothing to offer, and what the search or
    a customization raises. A look through many blocks shown before is done by `off_the_loop`."""
    query = await _resolve_query(turns, request, customizer)
    stages.done("query")
    if query is None:
        raise Skipped(SkipReason.NO_QUERY, _no_query(request))
    outcome.query = query

    # Entries still shown in the conversation are excluded in the search itself,
    # so the model gets up to max_entries new ones rather than fewer. Those shown by their text alone
    # are left out after it, from as many more as their blocks have lines (one an entry, at most).
    texts = shown_texts(turns, MEMORY_SOURCE)
    shown = shown_together(texts)
    # The blocks' lines: each block's line ends (the character between blocks ends none), and one line a block.
    lines = shown.count("\n") + len(texts)
    search_query = SearchQuery(
        text=query,
        vector=request.query_vector,
        stores=request.stores,
        limit=request.max_entries + min(MAX_SHOWN_LINES, lines),
        min_score=request.min_score,
        exclude_ids=injected_entry_ids(turns, MEMORY_SOURCE),
        ranking=request.ranking,
        filter=request.filter,
        explain=request.explain,
        gate=request.min_score is None,
        asked_time=request.asked_time,
    )
    result = await search(search_query)
    stages.done("search")
    stages.durations.update(result.durations)
    if result.left_out and len(result.left_out) == len(request.stores):
        raise SourceFailed("; ".join(result.left_out))
    # One store that cannot be searched leaves only itself out, as the reference does.
    outcome.notes = result.left_out + result.notes
    outcome.ranking = result.ranking
    new = [entry for entry in result.entries if entry.id not in search_query.exclude_ids]
    if len(new) * len(shown) <= SHOWN_ON_THE_LOOP:
        new = not_shown(new, shown)
    else:
        new = await off_the_loop(not_shown, new, shown)
    entries = new[: request.max_entries]
    if request.explain:
        outcome.considered = _considered(result, new, entries, search_query)
    if not entries:
        raise Skipped(
            SkipReason.NO_ENTRIES, result.silence or "the search found no entries not already in the conversation"
        )
    return tuple(entries)


def _considered(
    result: SearchResult[RetrievedEntry], new: list[RetrievedEntry], offered: list[RetrievedEntry], query: SearchQuery
) -> list[Considered]:
    """The search's candidates with the engine's verdicts (in the conversation: what the search returned
    that is not `new`; or ranked past what memory may inject: `new` but not `offered`), then the entries
    the search excluded as injected before."""
    offered_ids = {entry.id for entry in offered}
    in_conversation = {entry.id for entry in result.entries} - {entry.id for entry in new}
    for candidate in result.considered:
        if candidate.id in in_conversation:
            candidate.decide(Verdict.IN_CONVERSATION, "its text is already shown in the conversation")
        elif candidate.id not in offered_ids:
            candidate.decide(Verdict.RANKED_BELOW, f"ranked {candidate.rank}, after the entries memory may inject")
    return [*result.considered, *excluded(query.exclude_ids)]


# Between two blocks shown by their text alone, as they are looked through: a character no entry's content holds (it
# refuses control characters), so no entry is found across two blocks.
_BETWEEN_BLOCKS = "\x00"


def shown_together(texts: Sequence[str]) -> str:
    """Blocks shown by their text alone, as `is_shown` looks through them: one text, each block apart."""
    return _BETWEEN_BLOCKS.join(texts)


def not_shown(entries: Sequence[RetrievedEntry], shown: str) -> list[RetrievedEntry]:
    """The entries `shown` does not show (`is_shown`): all of them when it is empty (no entry escaped for nothing)."""
    return [entry for entry in entries if not is_shown(entry.content, shown)] if shown else list(entries)


def is_shown(content: str, shown: str) -> bool:
    """Whether an entry's content appears in `shown` (the blocks shown earlier by their text alone, `shown_together`),
    as written or as the default format escapes it: then it counts as written, and is not injected again."""
    return content in shown or escape_xml_text(content) in shown


def _no_query(request: MemoryRequest) -> str:
    """Why there is no query: whichever of the caller's query expression, its query, or the adaptive
    query gave none."""
    if request.query_expression:
        return "the query expression returned no text"
    if request.query:
        return "memory.query is blank"
    return "no text to search with in the latest relevant message"


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
