"""The engine's view of a conversation: only what injection decides on.

The servicer builds these views from the request; the engine never holds the
wire messages, so it cannot rewrite a block it does not own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum


class Role(Enum):
    USER = "user"
    ASSISTANT = "assistant"


@dataclass(frozen=True)
class InjectedRef:
    """A block contextfold folded in on an earlier call, still in the conversation."""

    source: str
    entry_ids: tuple[str, ...]
    # The sources a coalesced block holds.
    sources: tuple[str, ...] = ()
    # The text the model was shown.
    text: str = ""

    def holds(self, source: str) -> bool:
        return self.source == source or source in self.sources


@dataclass(frozen=True)
class Turn:
    """One message: its role, its text blocks in order, and what else injection must know."""

    role: Role
    texts: tuple[str, ...] = ()
    has_tool_result: bool = False
    injected: tuple[InjectedRef, ...] = field(default=())


def is_user_turn(turns: Sequence[Turn]) -> bool:
    """Whether the latest message is a fresh user ask: a user message holding no tool result.

    An empty conversation is not a user turn.
    """
    if not turns:
        return False
    last = turns[-1]
    return last.role is Role.USER and not last.has_tool_result


def latest_index(turns: Sequence[Turn], role: Role) -> int:
    """The index of the most recent message with `role`, or -1 when there is none."""
    for index in range(len(turns) - 1, -1, -1):
        if turns[index].role is role:
            return index
    return -1


def text_of(turn: Turn) -> str:
    """A message's text as the reference reads it: its text blocks joined by newlines, trimmed.

    Injected blocks are not text blocks, so what contextfold folded in never
    feeds a query.
    """
    return "\n".join(turn.texts).strip()


def injected_entry_ids(turns: Sequence[Turn], source: str) -> frozenset[str]:
    """Every entry id that blocks from `source` still carry in the conversation.

    What counts is what the agent kept: once it drops a block from its
    history, those entries may be injected again. No ledger is kept anywhere.
    """
    return frozenset(
        entry_id for turn in turns for ref in turn.injected if ref.holds(source) for entry_id in ref.entry_ids
    )


def shown_texts(turns: Sequence[Turn], source: str) -> tuple[str, ...]:
    """The text of every block from `source` that names no entries (a client that sent back only the
    text it was shown, as a plain HTTP client does): its entries are known by their content alone."""
    return tuple(ref.text for turn in turns for ref in turn.injected if ref.holds(source) and not ref.entry_ids)
