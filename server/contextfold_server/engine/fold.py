"""Where injected text goes, and how it is joined to what is there."""

from __future__ import annotations

from collections.abc import Sequence

from .conversation import Role, Turn, latest_index


def fold_target(turns: Sequence[Turn]) -> int:
    """The message injected text goes into: the most recent user message, or -1 when there is none.

    Folding into the user message, not a message of its own, keeps role
    alternation valid in chat and in the tool loop. Blocks are appended: a
    tool result must stay the first block of the turn that answers a tool use,
    and trailing blocks keep the conversation's stable prefix cacheable.
    """
    return latest_index(turns, Role.USER)


def shows_text(turn: Turn) -> bool:
    """Whether the model already sees text in this message: its own, or blocks injected before."""
    return bool(turn.texts or turn.injected)


def separated(rendered: str, follows_text: bool) -> str:
    """`rendered`, on a blank line of its own when it follows text.

    Some providers join adjacent text blocks, which would run injected text
    onto the user's own words, or onto the block before it.
    """
    return f"\n\n{rendered}" if follows_text and not rendered.startswith("\n") else rendered
