"""Where the injected text goes, and how it is joined to what is there."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .conversation import Role, Turn, latest_index


@dataclass(frozen=True)
class Fold:
    """Append one injected block holding `text` to the message at `target_index`."""

    target_index: int
    text: str


def fold_into_last_user_message(turns: Sequence[Turn], rendered: str) -> Fold | None:
    """Plan the fold of `rendered` into the most recent user message, or None when there is none.

    Folding into the user message, not a message of its own, keeps role
    alternation valid in chat and in the tool loop. The block is appended: a
    tool result must stay the first block of the turn that answers a tool use,
    and a trailing block keeps the conversation's stable prefix cacheable.
    Some providers join adjacent text blocks, so when the message already has
    text the injected text starts on a blank line of its own.
    """
    target_index = latest_index(turns, Role.USER)
    if target_index < 0:
        return None
    has_text = bool(turns[target_index].texts)
    separator = "\n\n" if has_text and not rendered.startswith("\n") else ""
    return Fold(target_index=target_index, text=f"{separator}{rendered}")
