"""The background purge of expired entries.

An entry that expired is never returned (every read compares its expiry with the
clock); the purge only reclaims its row, in bounded batches, so a burst of expiries
never holds locks or the database for long. Every worker of every replica purges
(a batch another is deleting waits for it, then finds those rows gone), at a jittered interval.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable

from .lifecycle import MemoryLifecycle

logger = logging.getLogger(__name__)

PURGE_BATCH = 500


async def purge_expired(
    lifecycle: MemoryLifecycle, interval: float, purged: Callable[[int], None], batch: int = PURGE_BATCH
) -> None:
    """Forever: every `interval` seconds (jittered), delete expired entries `batch` at a time until none
    is left, telling `purged` each batch's count. A failure (the database down) waits for the next round."""
    while True:
        await asyncio.sleep(interval * random.uniform(0.5, 1.5))
        try:
            while True:
                count = await lifecycle.purge_expired(batch)
                purged(count)
                if count < batch:
                    break
        except Exception as error:  # noqa: BLE001 - the purge retries next round, whatever failed
            logger.warning("purge failed, retrying next round | error=<%s>", error)
