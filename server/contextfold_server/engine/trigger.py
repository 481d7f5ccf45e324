"""When to inject: the reference's two named policies."""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum

from .conversation import Turn, is_user_turn


class Trigger(Enum):
    # Only on a fresh user ask: keeps the ask in the recency slot and never
    # interrupts the tool loop.
    USER_TURN = "user_turn"
    # Before every model call, for autonomous agents that consult memory at each step.
    EVERY_TURN = "every_turn"


def should_inject(trigger: Trigger, turns: Sequence[Turn]) -> bool:
    if trigger is Trigger.EVERY_TURN:
        return True
    return is_user_turn(turns)
