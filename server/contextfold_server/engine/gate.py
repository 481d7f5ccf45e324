"""Whether a source is asked at all for this model call: one decision, for memory and providers alike.

A source is asked only when it is on, its trigger fires, the conversation has a
user message to fold into, and that message does not already carry the
source's block (a retried call adds nothing). What a source does once asked is
its own; whether it is asked is decided here and nowhere else.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Protocol

from .conversation import Turn
from .trigger import Trigger, should_inject

if TYPE_CHECKING:
    from .entries import RetrievedEntry


class SkipReason(Enum):
    NOT_TRIGGERED = "not_triggered"
    NO_QUERY = "no_query"
    NO_USER_MESSAGE = "no_user_message"
    NO_ENTRIES = "no_entries"
    ALREADY_INJECTED = "already_injected"
    EMPTY_TEXT = "empty_text"
    FAILED = "failed"
    DISABLED = "disabled"
    TIMEOUT = "timeout"
    OVER_BUDGET = "over_budget"


class Skipped(Exception):
    """A source has nothing to fold for this call, for a reason that is no failure of its own."""

    def __init__(self, reason: SkipReason, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


class Customizer(Protocol):
    """The port to the caller's customizations, bound to one request's context.

    Each raises an exception whose message says what went wrong; the source
    it serves is then left out, and the call goes on.
    """

    async def trigger(self, expression: str) -> bool: ...

    async def query(self, expression: str) -> str: ...

    async def render(self, template: str, entries: Sequence[RetrievedEntry]) -> str: ...


@dataclass(frozen=True)
class Gate:
    """What decides whether one source is asked: its name, its trigger, and whether it is on."""

    source: str
    trigger: Trigger = Trigger.USER_TURN
    # A CEL expression that replaces the named trigger when set.
    trigger_expression: str = ""
    # Why the source is off for this call; empty when it is on.
    off: str = ""


async def admit(gate: Gate, turns: Sequence[Turn], target: int, customizer: Customizer) -> None:
    """Return when `gate`'s source is to be asked; raise `Skipped` with the reason when it is not.

    `target` is the fold target (`fold.fold_target`), computed once per call.
    """
    if gate.off:
        raise Skipped(SkipReason.DISABLED, gate.off)
    if gate.trigger_expression:
        if not await customizer.trigger(gate.trigger_expression):
            raise Skipped(SkipReason.NOT_TRIGGERED, "its trigger expression returned false")
    elif not should_inject(gate.trigger, turns):
        raise Skipped(SkipReason.NOT_TRIGGERED, "the last message is not a fresh user ask")
    if target < 0:
        raise Skipped(SkipReason.NO_USER_MESSAGE, "the conversation has no user message to fold into")
    if any(ref.holds(gate.source) for ref in turns[target].injected):
        raise Skipped(SkipReason.ALREADY_INJECTED, f"message {target} already carries its block")
