"""What each source contributed to one injection, or why it contributed nothing.

One type for every source: memory and each provider. Memory's outcome also
carries the query it searched with and the entries it folded; the report's
top-level memory fields are read from it at the API edge.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .entries import RetrievedEntry
from .explain import Considered
from .gate import SkipReason
from .ranking import Ranking


class SourceFailed(Exception):
    """A source failed for a reason its message already states for people; `private` is the fuller
    story (a dial error, say) that only the log and admins are told, if there is one."""

    def __init__(self, message: str, private: str = "") -> None:
        super().__init__(message)
        self.private = private


def describe(error: BaseException) -> str:
    """A failure put in words for the report."""
    return str(error) if isinstance(error, SourceFailed) else f"{type(error).__name__}: {error}"


def describe_privately(error: BaseException) -> str:
    """A failure in the words the log and admins are told: the fuller story, where there is one."""
    return error.private if isinstance(error, SourceFailed) and error.private else describe(error)


@dataclass
class SourceOutcome:
    source: str
    priority: int
    injected: bool = False
    skip_reason: SkipReason | None = None
    detail: str = ""
    tokens: int = 0
    # Seconds from the start of the call until the source answered or was given up on.
    duration: float = 0.0
    # Memory's own: what it searched with, and the entries it folded, best first.
    query: str = ""
    entries: tuple[RetrievedEntry, ...] = ()
    # The strategy that ranked memory's entries, once it searched.
    ranking: Ranking | None = None
    # What the report says besides, folded or not: memory's stores left out of the search,
    # a reranker that failed.
    notes: tuple[str, ...] = ()
    # The detail as admins see it, when it says more than callers are told.
    private_detail: str = ""
    # Memory's own, when explaining: the candidates its ranking weighed, best first (`explain.py`).
    considered: list[Considered] = field(default_factory=list)

    def skip(self, reason: SkipReason, detail: str) -> None:
        """Leave this source out, with why: it folds nothing."""
        self.injected, self.tokens, self.entries = False, 0, ()
        self.skip_reason, self.detail = reason, "; ".join((detail, *self.notes))

    def fold(self, tokens: int, entries: tuple[RetrievedEntry, ...] = ()) -> None:
        self.injected, self.tokens, self.entries = True, tokens, entries
        self.skip_reason, self.detail = None, "; ".join(self.notes)
