"""What Inject's calls to each provider came to, for whoever runs them: how often each outcome, and the latest.

Each worker tallies its calls in memory as they end (`injected`, or the reason a provider was left out:
`timeout`, `failed`, …) and adds them every `FLUSH_SECONDS` to `provider_outcomes`, on the owner's
connection; `GetProvider` and `ListProviders` read them back with the registrations (the console's
providers page shows them). A tally for a provider deleted meanwhile is dropped; a flush that fails
keeps its tallies for the next.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime

import psycopg

from ..observe.usage import Flushed
from ..postgres.schema import SCHEMA

logger = logging.getLogger(__name__)

FLUSH_SECONDS = 2.0
INJECTED = "injected"


@dataclass
class _Tally:
    count: int
    last_time: datetime
    last_detail: str


@dataclass(frozen=True)
class OutcomeCount:
    """One outcome of a provider's calls: `injected`, or a skip reason's name in lower case."""

    outcome: str
    count: int
    last_time: datetime
    last_detail: str


class ProviderOutcomes(Flushed):
    def __init__(self, conninfo: str, interval: float = FLUSH_SECONDS) -> None:
        super().__init__(conninfo, interval, "provider-outcomes")
        self._tallies: dict[tuple[str, str, str], _Tally] = {}

    def count(self, namespace: str, provider: str, outcome: str, detail: str) -> None:
        now = datetime.now(UTC)
        tally = self._tallies.get((namespace, provider, outcome))
        if tally is None:
            self._tallies[(namespace, provider, outcome)] = _Tally(1, now, detail)
        else:
            tally.count, tally.last_time, tally.last_detail = tally.count + 1, now, detail

    async def flush(self) -> None:
        """Add what was tallied since the last flush; on failure, keep it for the next."""
        tallies, self._tallies = self._tallies, {}
        if not tallies:
            return
        keys = list(tallies)
        try:
            async with await psycopg.AsyncConnection.connect(self._conninfo, autocommit=True) as conn:
                await conn.execute(
                    f"INSERT INTO {SCHEMA}.provider_outcomes AS o"
                    " (namespace, provider, outcome, count, last_time, last_detail)"
                    " SELECT t.* FROM unnest(%s::text[], %s::text[], %s::text[], %s::bigint[], %s::timestamptz[],"
                    " %s::text[]) AS t (namespace, provider, outcome, count, last_time, last_detail)"
                    f" JOIN {SCHEMA}.providers p ON p.namespace = t.namespace AND p.name = t.provider"
                    " ON CONFLICT (namespace, provider, outcome) DO UPDATE SET count = o.count + excluded.count,"
                    " last_detail = CASE WHEN excluded.last_time >= o.last_time"
                    " THEN excluded.last_detail ELSE o.last_detail END,"
                    " last_time = greatest(o.last_time, excluded.last_time)",
                    (
                        [namespace for namespace, _, _ in keys],
                        [provider for _, provider, _ in keys],
                        [outcome for _, _, outcome in keys],
                        [tallies[key].count for key in keys],
                        [tallies[key].last_time for key in keys],
                        [tallies[key].last_detail for key in keys],
                    ),
                )
        except (psycopg.Error, OSError) as error:
            for key, tally in tallies.items():
                kept = self._tallies.setdefault(key, _Tally(0, tally.last_time, tally.last_detail))
                kept.count += tally.count
            logger.warning("reason=<%s> | provider outcomes not recorded | kept for the next flush", error)
