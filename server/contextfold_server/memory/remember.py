"""Remember: store what a conversation's turns say, once per turn.

By default each new turn's text is an entry of its own (its id derived from the
turn's key, so a retry adds nothing). With the extractor, the turns' facts are
weighed against the nearest entries kept (engine of the decision: the chat model,
`extractor.py`): new facts are added, corrections update the entry they correct
(keeping its previous version), known facts change nothing. Either way the turns
are noted (`remembered_turns`) in the transaction that adds their entries, so a
turn is remembered once even when the entry it gave was deleted since.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..access.sealing import derived_key, keyed_digest
from ..embedding.batching import BatchingEmbedder
from ..engine.memory import SearchQuery
from ..engine.remember import SpokenTurn
from ..errors import InvalidArgument, NotFound, Unavailable
from .extractor import ExtractFailed, Extractor
from .lifecycle import MemoryLifecycle
from .records import MemoryChange, MemoryRecord, NewMemory, Scope
from .store import PostgresMemoryStore

logger = logging.getLogger(__name__)

# The most turns one call remembers (each is embedded): what one AddMemories adds at most.
MAX_NEW_TURNS = 1000
# How many kept entries near each fact the extractor is shown, and how near they must be.
KEPT_PER_FACT = 3
KEPT_MIN_SCORE = 0.4


@dataclass
class Remembered:
    """What a Remember did: each entry added or updated (in order, with `added` or `updated`), and how
    many qualifying turns were new and how many had been remembered before."""

    memories: list[tuple[str, MemoryRecord]] = field(default_factory=list)
    new_turns: int = 0
    skipped_turns: int = 0


class Rememberer:
    def __init__(
        self,
        store: PostgresMemoryStore,
        lifecycle: MemoryLifecycle,
        embedder: BatchingEmbedder,
        secret: bytes,
        extractor: Extractor | None = None,
    ) -> None:
        # Turns are keyed with a key of the service's: a turn's key (and its entry's id) is no hash anyone
        # could compute from words they guess.
        self._turn_key = derived_key(secret, "remembered turns")
        self._store = store
        self._lifecycle = lifecycle
        self._embedder = embedder
        self._extractor = extractor

    async def remember(
        self,
        namespace: str,
        store: str,
        scope: Scope,
        turns: Sequence[SpokenTurn],
        metadata: dict[str, Any],
        extract: bool,
        replaced_by: str,
    ) -> Remembered:
        """Remember the turns not remembered before into `store`, within `scope`."""
        if not turns:
            return Remembered()
        stores = await self._store.get_stores(namespace, [store])
        if store not in stores:
            raise NotFound("store", store)
        if stores[store].dimension != self._embedder.dimension:
            raise InvalidArgument.of(
                "store",
                f"has {stores[store].dimension} dimensions and the server's embedder ({self._embedder.name})"
                f" produces {self._embedder.dimension}: Remember embeds with it",
            )
        keys = {turn.identity: self._key(turn) for turn in turns}
        # Turns remembered before keys were keyed are known by their plain hash: not remembered twice.
        legacy = {turn.identity: _plain_key(turn) for turn in turns}
        done = await self._lifecycle.remembered(namespace, store, [*keys.values(), *legacy.values()])
        new = [turn for turn in turns if keys[turn.identity] not in done and legacy[turn.identity] not in done]
        if len(new) > MAX_NEW_TURNS:
            raise InvalidArgument.of(
                "messages",
                f"holds {len(new)} turns not remembered yet; a call remembers at most {MAX_NEW_TURNS}:"
                " send the conversation in parts, oldest first",
            )
        outcome = Remembered(new_turns=len(new), skipped_turns=len(turns) - len(new))
        if not new:
            return outcome
        new_keys = [keys[turn.identity] for turn in new]
        if not extract:
            vectors = await self._embedder.embed([turn.text for turn in new], tenant=namespace)
            memories = [
                NewMemory(turn.text, vector, f"turn-{key}", metadata, scope, embedded=True)
                for turn, key, vector in zip(new, new_keys, vectors, strict=True)
            ]
            added = await self._lifecycle.remember_turns(namespace, store, scope, new_keys, memories)
            outcome.memories = [("added", record) for record in added]
            return outcome
        adds, updates = await self._extract(namespace, store, scope, new)
        vectors = await self._embedder.embed([*adds, *(text for _, text in updates)], tenant=namespace)
        digest = hashlib.sha256("".join(new_keys).encode()).hexdigest()
        memories = [
            NewMemory(
                text,
                vector,
                f"fact-{hashlib.sha256((digest + text).encode()).hexdigest()[:32]}",
                metadata,
                scope,
                embedded=True,
            )
            for text, vector in zip(adds, vectors[: len(adds)], strict=True)
        ]
        added = await self._lifecycle.remember_turns(namespace, store, scope, new_keys, memories)
        outcome.memories = [("added", record) for record in added]
        for (kept, text), vector in zip(updates, vectors[len(adds) :], strict=True):
            change = MemoryChange(frozenset({"content", "vector"}), content=text, vector=vector, embedded=True)
            record, _ = await self._lifecycle.update_memory(
                namespace, kept.id, change, etag=kept.etag, scope=scope, replaced_by=replaced_by
            )
            outcome.memories.append(("updated", record))
        return outcome

    def _key(self, turn: SpokenTurn) -> str:
        return keyed_digest(self._turn_key, turn.identity).hex()[:32]

    async def _extract(
        self, namespace: str, store: str, scope: Scope, turns: Sequence[SpokenTurn]
    ) -> tuple[list[str], list[tuple[MemoryRecord, str]]]:
        """The facts to add, and the kept entries to update with their new text, as the extractor decides."""
        assert self._extractor is not None  # the request's parse refused `extract` otherwise
        started = time.perf_counter()
        try:
            facts = await self._extractor.facts([turn.text for turn in turns])
            if not facts:
                return [], []
            vectors = await self._embedder.embed(facts, tenant=namespace)
            searches = [
                self._store.search(
                    namespace,
                    scope,
                    SearchQuery(fact, tuple(vector), (store,), KEPT_PER_FACT, KEPT_MIN_SCORE, frozenset()),
                )
                for fact, vector in zip(facts, vectors, strict=True)
            ]
            kept: dict[str, MemoryRecord] = {}
            for _, results in await asyncio.gather(*searches):
                for result in results:
                    kept.setdefault(result.memory.id, result.memory)
            # The model is shown short ids (0, 1, …), not the entries' own: it copies those faithfully.
            short = {str(index): record for index, record in enumerate(kept.values())}
            decisions = await self._extractor.decide(facts, {key: record.content for key, record in short.items()})
        except ExtractFailed as error:
            raise Unavailable("EXTRACTOR_FAILED", f"the extractor failed: {error}") from None
        logger.debug("extracted | facts=<%d> seconds=<%.3f>", len(facts), time.perf_counter() - started)
        adds = list(dict.fromkeys(d.text for d in decisions if d.event == "ADD"))
        updates = {d.id: d.text for d in decisions if d.event == "UPDATE"}
        return adds, [(short[key], text) for key, text in updates.items()]


def _plain_key(turn: SpokenTurn) -> str:
    """A turn's key as Remember wrote it before turns were keyed with the service's secret."""
    return hashlib.sha256(turn.identity.encode()).hexdigest()[:32]
