"""Embedders: turn text into vectors, off the event loop."""

from __future__ import annotations

from typing import Protocol


class Embedder(Protocol):
    """Embeds batches of text. Vectors are compared by cosine similarity."""

    name: str
    dimension: int
    # How many batches it runs side by side, each on a thread of its own (a remote model's one at a time).
    batches_at_once: int

    async def token_counts(self, texts: list[str], tenant: str = "") -> list[int]:
        """What each text costs in a batch: its tokens, as the model reads them (a batch is padded to its
        longest). Counted for `tenant`: work off the event loop takes its turns."""
        ...

    async def embed(self, texts: list[str]) -> list[list[float]]: ...

    async def close(self) -> None: ...
