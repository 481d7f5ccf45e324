"""Where a JSON value lies in the text of a request body, so one value can be changed and every other
byte left as it was sent.

A model request is rewritten in one place only (the message memory is folded into); re-encoding the
whole document would change what the caller wrote (number forms, escapes, spacing, key order).
These functions walk only the path to that value, in Python: each value on the way is scanned by
the standard library's C decoder (`raw_decode`), which says where it ends.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

_DECODER = json.JSONDecoder()
_SPACE = re.compile(r"[ \t\n\r]*")


class NotJson(ValueError):
    """The text is not the JSON its shape needs, with where it stopped making sense."""


@dataclass(frozen=True)
class Span:
    """A value, decoded, and where its text starts and ends (`text[start:end]` is the value as sent)."""

    value: Any
    start: int
    end: int


def _space(text: str, at: int) -> int:
    match = _SPACE.match(text, at)
    assert match is not None  # `*` matches the empty string
    return match.end()


def _expect(text: str, at: int, char: str) -> int:
    if at >= len(text) or text[at] != char:
        raise NotJson(f"expected {char!r} at character {at}")
    return at + 1


def value_at(text: str, at: int = 0) -> Span:
    """The value that starts at `at` (after white space)."""
    start = _space(text, at)
    try:
        value, end = _DECODER.raw_decode(text, start)
    except json.JSONDecodeError as error:
        raise NotJson(f"{error.msg} at character {error.pos}") from None
    return Span(value, start, end)


def document(text: str) -> Span:
    """The one value the text holds, nothing after it but white space."""
    span = value_at(text)
    if _space(text, span.end) != len(text):
        raise NotJson(f"extra data after character {span.end}")
    return span


def members(text: str, span: Span) -> dict[str, Span]:
    """The members of the object `span` is, each key to its value's span; a key sent twice is its last,
    as most parsers read it."""
    if not isinstance(span.value, dict):
        raise NotJson(f"expected an object at character {span.start}")
    found: dict[str, Span] = {}
    at = _space(text, _expect(text, span.start, "{"))
    if text[at] == "}":
        return found
    while True:
        key = value_at(text, at)
        at = _space(text, _expect(text, _space(text, key.end), ":"))
        found[key.value] = member = value_at(text, at)
        at = _space(text, member.end)
        if text[at] == "}":
            return found
        at = _space(text, _expect(text, at, ","))


def elements(text: str, span: Span) -> Iterator[Span]:
    """The elements of the array `span` is, in order."""
    if not isinstance(span.value, list):
        raise NotJson(f"expected an array at character {span.start}")
    at = _space(text, _expect(text, span.start, "["))
    if text[at] == "]":
        return
    while True:
        element = value_at(text, at)
        yield element
        at = _space(text, element.end)
        if text[at] == "]":
            return
        at = _space(text, _expect(text, at, ","))


def appended_to_string(text: str, span: Span, addition: str) -> tuple[int, str]:
    """Where to insert, and what, so the string `span` is ends with `addition`: before its closing
    quote, `addition` escaped as JSON escapes it (non-ASCII kept as it is)."""
    return span.end - 1, json.dumps(addition, ensure_ascii=False)[1:-1]


def appended_to_array(text: str, span: Span, added: list[Any]) -> tuple[int, str]:
    """Where to insert, and what, so the array `span` is ends with the elements `added`: before its
    closing bracket, after a comma when it holds something already."""
    encoded = ", ".join(json.dumps(element, ensure_ascii=False) for element in added)
    return span.end - 1, (", " if span.value else "") + encoded
