"""The API key a client sends, checked before it is sent: a header carries printable ASCII only, and a
key copied from a page's placeholder (`cfk_…`) is not a key. Each refusal names where the key came
from (an argument, an option, an environment variable)."""

from __future__ import annotations

import unicodedata

from .errors import InvalidApiKey

# The docs write a key as `cfk_…`: the ellipsis is the sign of a key pasted from a page.
_ELLIPSIS = "\u2026"


def key_problem(key: str) -> str | None:
    """What is wrong with `key` as an API key, None when nothing is."""
    if not key.strip():
        return "is empty"
    if _ELLIPSIS in key:
        return (
            f"holds '…' (U+2026) at position {key.index(_ELLIPSIS)}: it is a page's placeholder (cfk_…), not a"
            " key; create one with `contextfold keys create`"
        )
    if "..." in key or (key.startswith("<") and key.endswith(">")) or key.startswith("$"):
        return "looks like a placeholder, not a key; create one with `contextfold keys create`"
    for position, char in enumerate(key):
        if not "\x21" <= char <= "\x7e":
            name = unicodedata.name(char, "a control character").lower() if char != " " else "a space"
            return (
                f"holds {name} (U+{ord(char):04X}) at position {position}, which a header cannot carry"
                " (a key is printable ASCII, no spaces)"
            )
    return None


def checked_key(key: str, source: str) -> str:
    """`key`, unless it cannot be an API key: then `InvalidApiKey`, naming `source` and why."""
    problem = key_problem(key)
    if problem is not None:
        raise InvalidApiKey(f"the API key from {source} {problem}")
    return key
