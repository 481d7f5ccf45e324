"""Why memory injected what it did: each candidate the ranking weighed, and what became of it.

Asked for with `InjectRequest.explain` (the console's playground asks). Each stage that
decides a candidate's fate says so where it decides: the ranking (its signals, a score
below `min_score`, a rank past what the search returns), the engine (already in the
conversation, past `max_entries`), and the fold (a token budget). Those still open when
the report is written were offered to the fold, and their verdict is read from what it did
(`settled`). Nothing here runs unless explaining was asked for.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from .gate import SkipReason

# The candidates a report lists, best first: enough to see past the entries injected, bounded so an
# explained report stays a small share of a response.
MAX_EXPLAINED = 50
# The characters of a candidate's content a report shows.
MAX_EXPLAINED_CHARS = 2000
# More entries a nearest-only search reads when explaining, to show those just below the cut.
EXPLAIN_BELOW = 10


class Verdict(enum.Enum):
    INJECTED = "injected"
    RANKED_BELOW = "ranked_below"
    BELOW_MIN_SCORE = "below_min_score"
    IN_CONVERSATION = "in_conversation"
    OVER_BUDGET = "over_budget"
    NOT_FOLDED = "not_folded"
    NOT_RELEVANT = "not_relevant"
    NEAR_COPY = "near_copy"


@dataclass
class Considered:
    """A candidate as the ranking weighed it: its score (what the order follows), its similarity, what
    each signal added, its place (1 for the best; 0 for one excluded before ranking), and its verdict
    once a stage decided it (None while it is still offered)."""

    id: str
    store: str
    content: str
    score: float
    similarity: float
    rank: int
    signals: dict[str, float] = field(default_factory=dict)
    # The signals' own values, under the default ranking (`weighing.SIGNALS`).
    inputs: dict[str, float] = field(default_factory=dict)
    verdict: Verdict | None = None
    detail: str = ""

    def decide(self, verdict: Verdict, detail: str) -> None:
        """The first stage to decide a candidate's fate has the say."""
        if self.verdict is None:
            self.verdict, self.detail = verdict, detail


def excluded(ids: Iterable[str]) -> list[Considered]:
    """Entries the search left out because an earlier turn's block already holds them."""
    return [
        Considered(entry, "", "", 0.0, 0.0, 0, verdict=Verdict.IN_CONVERSATION, detail="injected in an earlier turn")
        for entry in sorted(ids)
    ]


def settled(
    candidates: Iterable[Considered],
    injected: bool,
    injected_ids: Iterable[str],
    skip_reason: SkipReason | None,
    detail: str,
) -> list[Considered]:
    """The candidates with a verdict each: those still open were offered to the fold, so they were
    injected, cut to keep memory's block within a budget, or left out with memory's block (its reason).
    Pure: a report written twice (a fold undone) reads the fold's last word."""
    ids = set(injected_ids)
    out: list[Considered] = []
    for candidate in candidates:
        if candidate.verdict is not None:
            out.append(candidate)
            continue
        if injected and candidate.id in ids:
            verdict, why = Verdict.INJECTED, "folded into the model input"
        elif injected:
            verdict, why = Verdict.OVER_BUDGET, "left out to keep memory's block within its token budget"
        elif skip_reason is SkipReason.OVER_BUDGET:
            verdict, why = Verdict.OVER_BUDGET, detail
        else:
            verdict, why = Verdict.NOT_FOLDED, detail
        out.append(replace(candidate, verdict=verdict, detail=why))
    return out
