"""The search query derived from the conversation."""

from __future__ import annotations

from collections.abc import Sequence

from .conversation import Role, Turn, is_user_turn, latest_index, text_of


def adaptive_query(turns: Sequence[Turn]) -> str | None:
    """The reference's adaptive query, or None when there is nothing to search for.

    On a user turn it is the latest user text: what the user just asked. On
    any other turn it is the latest assistant text: the previous autonomous
    step, which says what the agent is working on now.
    """
    role = Role.USER if is_user_turn(turns) else Role.ASSISTANT
    index = latest_index(turns, role)
    if index < 0:
        return None
    return text_of(turns[index]) or None
