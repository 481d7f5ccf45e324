"""Memory entries as the engine sees them (ranked in ranking.py)."""

from __future__ import annotations

from collections.abc import Mapping
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
