"""Memory entries as the engine sees them, and their ranking."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class RetrievedEntry:
    id: str
    store: str
    content: str
    score: float
    metadata: Mapping[str, Any] = field(default_factory=dict)
    created_at: datetime | None = None


def rank_across_stores(entries: Iterable[RetrievedEntry], limit: int) -> list[RetrievedEntry]:
    """The `limit` most similar entries, whichever store holds them.

    The reference concatenates stores in registration order and cuts, so an
    early store's weak matches can crowd out a later store's strong ones;
    ranking on the similarity itself does not. Ties keep their given order.
    """
    return sorted(entries, key=lambda entry: entry.score, reverse=True)[:limit]
