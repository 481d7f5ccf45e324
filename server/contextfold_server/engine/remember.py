"""Which turns of a conversation Remember keeps, and how each is known again.

Injected context is never remembered (the reference's rule: what was folded in
must not be extracted back into memory): an `InjectedBlock` is no turn's text; a
text block repeating an injected block's text is left out too (a client that
shows injected blocks to the model as text, and keeps both), and so is a text
block holding nothing but a `<memory>` region (the shipped reference folds its
context as a text block of the user's message).
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from .conversation import Role, Turn

# A text block that is a whole memory region of the reference's format, and nothing else.
_MEMORY_REGION = re.compile(r"\A\s*<memory>.*</memory>\s*\Z", re.DOTALL)


@dataclass(frozen=True)
class SpokenTurn:
    """A turn to remember: its role and text, and what makes it this turn."""

    role: Role
    text: str
    # The same for the same words in the same conversation and scope: a turn is remembered once. The
    # memory layer keys it with a secret of the service's (memory/remember.py), so its key, and the id
    # of the entry it gives, tell nobody what was said.
    identity: str


def spoken_turns(
    turns: Sequence[Turn], roles: Collection[Role], min_chars: int, identity: Sequence[str]
) -> list[SpokenTurn]:
    """The turns of `roles` whose own text (injected context left out) has at least `min_chars`
    characters, each known by `identity` (store, scope, conversation), its role and its text. A turn
    repeated word for word is one turn."""
    injected = injected_texts(turns)
    spoken: dict[str, SpokenTurn] = {}
    for turn in turns:
        if turn.role not in roles:
            continue
        text = own_text(turn, injected)
        if len(text) < min_chars:
            continue
        known_by = json.dumps([*identity, turn.role.value, text], ensure_ascii=False, separators=(",", ":"))
        spoken.setdefault(known_by, SpokenTurn(turn.role, text, known_by))
    return list(spoken.values())


def own_text(turn: Turn, injected: Collection[str]) -> str:
    """A turn's own words, as Remember keeps them: its text blocks but injected context (`is_own`), a line
    apart."""
    return "\n".join(text for text in turn.texts if is_own(text, injected)).strip()


def injected_texts(turns: Sequence[Turn]) -> set[str]:
    """The texts of the conversation's injected blocks: a text block repeating one is not a turn's own."""
    return {ref.text for turn in turns for ref in turn.injected if ref.text}


def is_own(text: str, injected: Collection[str]) -> bool:
    """Whether a text block is its turn's own words: not an injected block's text repeated
    (`injected_texts`), nor a whole `<memory>` region."""
    return text not in injected and not _MEMORY_REGION.match(text)
