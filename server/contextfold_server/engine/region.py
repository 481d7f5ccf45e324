"""The context region: every source's text, ordered, within budget, folded in one place.

Each contributing source gets one block, adjacent, appended to the latest user
message, ordered by priority (highest first), then registration (memory, which
is built in, before any provider). Over a token budget, the lowest-priority
source yields first, a provider's text whole and memory an entry at a time
(its lowest-ranked first); no text is ever cut part-way, so every block stays
well-formed. Optionally the region is one coalesced block instead.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace

from .entries import RetrievedEntry
from .fold import separated
from .gate import Skipped, SkipReason
from .memory import MEMORY_SOURCE
from .outcome import describe

COALESCED_SOURCE = "coalesced"

TokenCounter = Callable[[str], Awaitable[int]]
RenderEntries = Callable[[tuple[RetrievedEntry, ...]], Awaitable[str]]


@dataclass(frozen=True)
class Candidate:
    """A source's offer: a provider's text, or memory's entries (best first) and how to render them."""

    source: str
    priority: int
    # Registration order among providers; memory, built in, is -1.
    order: int
    text: str = ""
    entries: tuple[RetrievedEntry, ...] = ()
    render_entries: RenderEntries | None = None
    max_tokens: int = 0

    async def render(self) -> str:
        return self.text if self.render_entries is None else await self.render_entries(self.entries)

    def yield_one(self) -> Candidate | None:
        """This offer with the least of it given up: memory's lowest-ranked entry, or all of a provider's text."""
        if self.render_entries is not None and len(self.entries) > 1:
            return replace(self, entries=self.entries[:-1])
        return None


@dataclass(frozen=True)
class PlannedBlock:
    source: str
    text: str
    entry_ids: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()


@dataclass
class RegionPlan:
    blocks: list[PlannedBlock] = field(default_factory=list)
    # The offers that made it, as folded (memory possibly with fewer entries).
    kept: list[Candidate] = field(default_factory=list)
    # The offers left out, each with why.
    dropped: dict[str, Skipped] = field(default_factory=dict)
    tokens: dict[str, int] = field(default_factory=dict)
    total_tokens: int = 0


class _Measures:
    """Each offer rendered and counted once per size and placement: a budget asks for the same again."""

    def __init__(self, count_tokens: TokenCounter) -> None:
        self._count_tokens = count_tokens
        self._texts: dict[tuple[str, int], str] = {}
        self._tokens: dict[tuple[str, int, bool], int] = {}

    async def text(self, candidate: Candidate) -> str:
        key = (candidate.source, len(candidate.entries))
        if key not in self._texts:
            self._texts[key] = await candidate.render()
        return self._texts[key]

    async def tokens(self, candidate: Candidate, follows_text: bool) -> int:
        """Tokens of the candidate's block, on a blank line of its own when it follows text."""
        key = (candidate.source, len(candidate.entries), follows_text)
        if key not in self._tokens:
            self._tokens[key] = await self._count_tokens(separated(await self.text(candidate), follows_text))
        return self._tokens[key]


async def plan_region(
    candidates: Sequence[Candidate],
    *,
    follows_text: bool,
    max_tokens: int,
    coalesce: bool,
    count_tokens: TokenCounter,
) -> RegionPlan:
    """The blocks to fold into a message that already shows text (`follows_text`) or does not."""
    plan = RegionPlan()
    measures = _Measures(count_tokens)

    kept: list[Candidate] = []
    for candidate in sorted(candidates, key=lambda c: (-c.priority, c.order)):
        try:
            fitted = await _within_own_cap(candidate, measures)
            blank = fitted is not None and not (await measures.text(fitted)).strip()
        except Exception as error:  # noqa: BLE001 - a rendering that fails leaves only its source out.
            plan.dropped[candidate.source] = Skipped(SkipReason.FAILED, describe(error))
            continue
        if fitted is None:
            plan.dropped[candidate.source] = Skipped(
                SkipReason.OVER_BUDGET, f"its text is over its own cap of {candidate.max_tokens} tokens"
            )
        elif blank:
            plan.dropped[candidate.source] = Skipped(SkipReason.EMPTY_TEXT, "its text is blank")
        else:
            kept.append(fitted)

    while kept:
        texts = [await measures.text(candidate) for candidate in kept]
        blocks = _blocks(kept, texts, follows_text, coalesce)
        if coalesce:
            total = await count_tokens(blocks[0].text) if blocks else 0
        else:
            total = sum([await measures.tokens(c, follows_text or i > 0) for i, c in enumerate(kept)])
        if not max_tokens or total <= max_tokens:
            plan.blocks, plan.kept, plan.total_tokens = blocks, kept, total
            plan.tokens = {candidate.source: await measures.tokens(candidate, follows_text=False) for candidate in kept}
            return plan
        lowest = kept[-1]
        smaller = lowest.yield_one()
        if smaller is not None:
            kept[-1] = smaller
        else:
            kept.pop()
            plan.dropped[lowest.source] = Skipped(
                SkipReason.OVER_BUDGET, f"the request's budget of {max_tokens} tokens went to higher-priority sources"
            )
    return plan


async def _within_own_cap(candidate: Candidate, measures: _Measures) -> Candidate | None:
    """The offer, yielding what it must to fit its own cap (counted without a separator), or None."""
    current: Candidate | None = candidate
    while (
        current is not None
        and candidate.max_tokens
        and await measures.tokens(current, follows_text=False) > candidate.max_tokens
    ):
        current = current.yield_one()
    return current


def _blocks(kept: Sequence[Candidate], texts: Sequence[str], follows_text: bool, coalesce: bool) -> list[PlannedBlock]:
    memory_ids = tuple(
        entry.id for candidate in kept if candidate.source == MEMORY_SOURCE for entry in candidate.entries
    )
    if coalesce:
        sources = tuple(candidate.source for candidate in kept)
        return [PlannedBlock(COALESCED_SOURCE, separated("\n\n".join(texts), follows_text), memory_ids, sources)]
    return [
        PlannedBlock(
            candidate.source, separated(text, follows_text or index > 0), tuple(e.id for e in candidate.entries)
        )
        for index, (candidate, text) in enumerate(zip(kept, texts, strict=True))
    ]
