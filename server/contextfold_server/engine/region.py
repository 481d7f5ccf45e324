"""The context region: every source's text, ordered, within budget, folded in one place.

Each contributing source gets one block, adjacent, appended to the latest user
message, ordered by priority (highest first), then registration (memory, which
is built in, before any provider). Over a token budget, the lowest-priority
source yields first, a provider's text whole and memory an entry at a time
(its lowest-ranked first); no text is ever cut part-way, so every block stays
well-formed. Optionally the region is one coalesced block instead.

Enforcing a budget takes time in the size of the blocks, not in their number
times their size: each rendering is counted once, and memory's largest share
that fits is found by halving (a handful of renderings, not one per entry).
"""

from __future__ import annotations

import functools
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
class Offer:
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

    @property
    def divisible(self) -> bool:
        """Whether it can give up part of itself: memory, entry by entry, down to one; a provider's text cannot."""
        return self.render_entries is not None and len(self.entries) > 1

    def keeping(self, count: int) -> Offer:
        """Memory's offer cut to its `count` best entries."""
        return replace(self, entries=self.entries[:count])


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
    kept: list[Offer] = field(default_factory=list)
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

    async def text(self, offer: Offer) -> str:
        key = (offer.source, len(offer.entries))
        if key not in self._texts:
            self._texts[key] = await offer.render()
        return self._texts[key]

    async def tokens(self, offer: Offer, follows_text: bool) -> int:
        """Tokens of the offer's block, on a blank line of its own when it follows text."""
        key = (offer.source, len(offer.entries), follows_text)
        if key not in self._tokens:
            self._tokens[key] = await self._count_tokens(separated(await self.text(offer), follows_text))
        return self._tokens[key]


async def plan_region(
    offers: Sequence[Offer],
    *,
    follows_text: bool,
    max_tokens: int,
    coalesce: bool,
    count_tokens: TokenCounter,
) -> RegionPlan:
    """The blocks to fold into a message that already shows text (`follows_text`) or does not."""
    plan = RegionPlan()
    measures = _Measures(count_tokens)

    kept: list[Offer] = []
    for offer in sorted(offers, key=lambda c: (-c.priority, c.order)):
        try:
            within_cap = functools.partial(_within_cap, measures, cap=offer.max_tokens)
            fitted = await _largest_within(offer, within_cap)
            blank = fitted is not None and not (await measures.text(fitted)).strip()
        except Skipped as skipped:
            plan.dropped[offer.source] = skipped
            continue
        except Exception as error:  # noqa: BLE001 - a rendering that fails leaves only its source out.
            plan.dropped[offer.source] = Skipped(SkipReason.FAILED, describe(error))
            continue
        if fitted is None:
            plan.dropped[offer.source] = Skipped(
                SkipReason.OVER_BUDGET, f"its text is over its own cap of {offer.max_tokens} tokens"
            )
        elif blank:
            plan.dropped[offer.source] = Skipped(SkipReason.EMPTY_TEXT, "its text is blank")
        else:
            kept.append(fitted)

    async def total(region: list[Offer]) -> int:
        """The region's tokens, from each block's count. For one coalesced block, the parts' counts
        and their joins, which the count of the block as folded confirms below."""
        counts = [await measures.tokens(c, follows_text or i > 0) for i, c in enumerate(region)]
        return sum(counts)

    async def fits(region: list[Offer], last: Offer | None = None) -> bool:
        """Whether `region` (with `last` after it, if given) is within the request's budget."""
        return not max_tokens or await total([*region, *([last] if last else [])]) <= max_tokens

    while kept:
        if await fits(kept):
            blocks = _blocks(kept, [await measures.text(c) for c in kept], follows_text, coalesce)
            exact = sum([await count_tokens(block.text) for block in blocks]) if coalesce else await total(kept)
            if not max_tokens or exact <= max_tokens:
                plan.blocks, plan.kept, plan.total_tokens = blocks, kept, exact
                plan.tokens = {c.source: await measures.tokens(c, follows_text=False) for c in kept}
                return plan
        lowest = kept.pop()
        if lowest.divisible:
            fits_after = functools.partial(fits, list(kept))
            smaller = await _largest_within(lowest.keeping(len(lowest.entries) - 1), fits_after)
            if smaller is not None:
                kept.append(smaller)
                continue
        plan.dropped[lowest.source] = Skipped(
            SkipReason.OVER_BUDGET, f"the request's budget of {max_tokens} tokens went to higher-priority sources"
        )
    return plan


async def _within_cap(measures: _Measures, offer: Offer, *, cap: int) -> bool:
    """Whether an offer is within its own cap (counted without a separator); any size, with none."""
    return not cap or await measures.tokens(offer, follows_text=False) <= cap


async def _largest_within(offer: Offer, fits: Callable[[Offer], Awaitable[bool]]) -> Offer | None:
    """The offer whole if it fits; else memory's largest share of its best entries that fits; else None.

    Halving assumes that fewer entries never take more tokens, which holds for every
    format: an entry adds its own line.
    """
    if await fits(offer):
        return offer
    if offer.render_entries is None or len(offer.entries) <= 1:
        return None
    low, high = 1, len(offer.entries) - 1
    if not await fits(offer.keeping(low)):
        return None
    while low < high:
        middle = (low + high + 1) // 2
        if await fits(offer.keeping(middle)):
            low = middle
        else:
            high = middle - 1
    return offer.keeping(low)


def _blocks(kept: Sequence[Offer], texts: Sequence[str], follows_text: bool, coalesce: bool) -> list[PlannedBlock]:
    memory_ids = tuple(entry.id for offer in kept if offer.source == MEMORY_SOURCE for entry in offer.entries)
    if coalesce:
        sources = tuple(offer.source for offer in kept)
        return [PlannedBlock(COALESCED_SOURCE, separated("\n\n".join(texts), follows_text), memory_ids, sources)]
    return [
        PlannedBlock(offer.source, separated(text, follows_text or index > 0), tuple(e.id for e in offer.entries))
        for index, (offer, text) in enumerate(zip(kept, texts, strict=True))
    ]
