"""Embedders: turn text into vectors, off the event loop."""

from __future__ import annotations

from typing import Protocol


class Embedder(Protocol):
    """Embeds batches of text. Vectors are compared by cosine similarity."""

    name: str
    dimension: int

    async def embed(self, texts: list[str]) -> list[list[float]]: ...

    async def close(self) -> None: ...
