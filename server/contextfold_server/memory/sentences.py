"""A vector for each sentence of an entry that says several things, embedded after the entry is written.

An entry's one vector is near none of the things a turn of several sentences says ("Thanks! It was tough, but
I'm doing ok. Been reading that book you recommended"): the default ranking also searches a scope's sentences
(`statements.sentences_statement`) and weighs how much nearer an entry's best sentence is than the entry itself
(`weighing`'s `sentence`). Each sentence is a row beside its entry (migration 24), written here, by the bulk
workers, not by the write: an add costs what it did (its sentences are about as many characters again for the
model), and the model's time for them is taken in the tenants' turns of the bulk lane, at its lower priority, after
the interactive calls. An entry is found by its own vector from its write on; by its sentences a moment later.

Only the server's model's vectors get sentences: a caller's vector is another model's, and the sentences would be
compared with a query in the server's space. An entry whose vector is not known to be the server's (written before
migration 24, or imported) is embedded again first, and gets sentences only if its vector is what the model makes
of its text.
"""

from __future__ import annotations

import asyncio
import logging
import random
import zlib
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..embedding.batching import BatchingEmbedder
from ..engine.weighing import READ_MOST, entry_sentences
from ..errors import ResourceExhausted
from ..postgres.schema import SCHEMA
from .statements import SENTENCES_DONE, SENTENCES_UNCHECKED
from .store import PostgresMemoryStore

logger = logging.getLogger(__name__)

# The entries of one namespace read in one round, and the most texts (sentences, and entries embedded again) the
# round gives the model for them: about a second of the model's time, a few of its batches, and one short
# transaction. The rest wait for the next round. A tenant may queue 2,048 texts on the model (`BatchingEmbedder`):
# its own calls keep most of that room.
FILL_BATCH = 64
FILL_TEXTS = 256
# How often a bulk worker looks for entries whose sentences are left to embed (jittered), when it found none.
FILL_INTERVAL_SECONDS = 1.0
# The setting that lets the filler's connection see which namespaces have entries waiting (migration 24's policy).
PENDING_SETTING = "contextfold.sentences_pending"
# How like the model's embedding of its text an entry's vector must be to be the model's: the same model gives the
# same vector, to rounding (batches pad differently); another model's is not this near.
SAME_VECTOR = 0.999

# The next namespace after `%s` with entries waiting, read from the pending index: the namespaces are visited
# one after another, each a step of the index, however many entries wait in each.
_NEXT_WAITING = (
    f"SELECT namespace FROM {SCHEMA}.memories WHERE sentences_state < 2 AND namespace > %s ORDER BY namespace LIMIT 1"
)
# Of an entry whose vector is known to be the model's, what its sentences are read from (`entry_sentences`); of one
# not known, all of it, to embed again as its vector was.
_WAITING = (
    f"SELECT m.id, m.version, m.dimension, m.sentences_state, CASE WHEN m.sentences_state = {SENTENCES_UNCHECKED}"
    f" THEN m.content ELSE left(m.content, {READ_MOST}) END AS content,"
    f" CASE WHEN m.sentences_state = {SENTENCES_UNCHECKED} THEN m.embedding END AS embedding"
    f" FROM {SCHEMA}.memories m WHERE m.namespace = %(namespace)s AND m.sentences_state < 2"
    " ORDER BY m.seq LIMIT %(batch)s"
)
# Each entry settled as it was read (the same version, still waiting): its state, and its sentences' rows with its
# store and scope. An entry changed since is left for its next round.
_SETTLE = (
    "WITH given AS (SELECT * FROM unnest(%(ids)s::text[], %(versions)s::bigint[], %(states)s::smallint[])"
    " AS g(id, version, state)),"
    f" settled AS (UPDATE {SCHEMA}.memories m SET sentences_state = g.state FROM given g"
    " WHERE m.namespace = %(namespace)s AND m.id = g.id AND m.version = g.version AND m.sentences_state < 2"
    " RETURNING m.namespace, m.id, m.store, m.user_id, m.agent_id, m.session_id, m.dimension)"
    f" INSERT INTO {SCHEMA}.sentences"
    " (namespace, memory_id, position, store, user_id, agent_id, session_id, dimension, embedding)"
    " SELECT s.namespace, s.id, t.position, s.store, s.user_id, s.agent_id, s.session_id, s.dimension, t.embedding"
    " FROM settled s JOIN unnest(%(sentence_ids)s::text[], %(positions)s::smallint[], %(embeddings)b::halfvec[])"
    " AS t(id, position, embedding) ON t.id = s.id WHERE s.namespace = %(namespace)s"
    " ON CONFLICT DO NOTHING"
)


@dataclass(frozen=True)
class Settled:
    """An entry as the filler leaves it: its version as read, its state (`SENTENCES_DONE`, or None: not the
    server's model's vector), and its sentences' vectors in order."""

    id: str
    version: int
    state: int | None
    vectors: tuple[np.ndarray, ...] = ()


class SentenceFiller:
    """Embeds the sentences of the entries waiting for them (`memories.sentences_state`), a namespace's batch at a
    time, each namespace in its turn; a bulk worker of several takes the namespaces its `share` names (the
    namespace's hash modulo their count)."""

    def __init__(
        self,
        store: PostgresMemoryStore,
        embedder: BatchingEmbedder,
        share: tuple[int, int] = (0, 1),
        settled: Callable[[str, int], None] = lambda outcome, entries: None,
    ):
        self._store = store
        self._embedder = embedder
        self._share = share
        # Told how many entries each round settled, by outcome (`_outcome`).
        self._settled = settled

    def _mine(self, namespace: str) -> bool:
        index, count = self._share
        return zlib.crc32(namespace.encode()) % count == index

    async def run(self, interval: float = FILL_INTERVAL_SECONDS) -> None:
        """Forever: settle what waits, a round after another while any is left, else every `interval` seconds
        (jittered). A failure (the database down) waits for the next round."""
        while True:
            try:
                if await self.fill():
                    continue
            except Exception as error:  # noqa: BLE001 - the filler retries next round, whatever failed
                logger.warning("embedding entries' sentences failed, retrying next round | error=<%s>", error)
            await asyncio.sleep(interval * random.uniform(0.5, 1.5))

    async def fill(self) -> int:
        """One round: a batch of each namespace (of this worker's share) that has entries waiting, in turn, so
        that one tenant's backlog delays another's by one batch at most, and what fails for one namespace waits
        for its next round without holding back the namespaces after it. How many entries were settled."""
        settled, after = 0, ""
        while (namespace := await self._next_waiting(after)) is not None:
            after = namespace
            if not self._mine(namespace):
                continue
            try:
                settled += await self.fill_namespace(namespace)
            except ResourceExhausted:
                pass  # the tenant's own calls fill its room on the model: its sentences wait a round
            except Exception as error:  # noqa: BLE001 - its next round tries again; the others go on
                logger.warning(
                    "embedding entries' sentences failed, retrying next round | namespace=<%s> error=<%s>",
                    namespace,
                    error,
                )
        return settled

    async def _next_waiting(self, after: str) -> str | None:
        """The first namespace after `after` with entries waiting, of every namespace (the connection's setting
        lets it see those entries' rows, and nothing else); None when none is left."""
        async with self._store.connection("") as conn:
            await conn.execute("SELECT set_config(%s, 'on', true)", (PENDING_SETTING,))
            cursor = await conn.execute(_NEXT_WAITING, (after,))
            row = await cursor.fetchone()
            return row["namespace"] if row else None

    async def fill_namespace(self, namespace: str, batch: int = FILL_BATCH) -> int:
        """Settle up to `batch` of `namespace`'s entries waiting, oldest first: how many were read."""
        read = await self._store.read(namespace, _WAITING, {"namespace": namespace, "batch": batch})
        # Each entry's sentences, split once: none for an entry of another dimension than the model's.
        said = {row["id"]: self._sentences(row) for row in read}
        rows = within_texts(read, said)
        if not rows:
            return 0
        settled = await self._settle(namespace, rows, said)
        await self._write(namespace, settled)
        for outcome, entries in Counter(_outcome(entry) for entry in settled).items():
            self._settled(outcome, entries)
        return len(rows)

    def _sentences(self, row: dict[str, Any]) -> list[str]:
        """A waiting entry's sentences to embed (`entry_sentences`); none for an entry of another dimension than the
        model's."""
        return entry_sentences(row["content"]) if row["dimension"] == self._embedder.dimension else []

    async def _settle(self, namespace: str, rows: list[dict[str, Any]], said: Mapping[str, list[str]]) -> list[Settled]:
        """What each waiting entry gets: its sentences' vectors (`said`, by id), none for an entry of one sentence
        or of another dimension than the model's, and for an entry not known to be the model's, none unless its
        vector is."""
        texts: list[str] = []
        for row in rows:
            if said[row["id"]]:
                if row["sentences_state"] == SENTENCES_UNCHECKED:
                    texts.append(row["content"])
                texts += said[row["id"]]
        embedded = await self._embedder.embed(texts, tenant=namespace) if texts else []
        vectors = iter(np.asarray(embedded, dtype=np.float32))
        settled = []
        for row in rows:
            if not said[row["id"]]:
                # Of one sentence, its own vector is its sentence's; of another dimension, not the model's.
                state = SENTENCES_DONE if row["dimension"] == self._embedder.dimension else None
                settled.append(Settled(row["id"], row["version"], state))
                continue
            ours = True
            if row["sentences_state"] == SENTENCES_UNCHECKED:
                stored = np.asarray(row["embedding"].to_numpy(), dtype=np.float32)
                ours = _cosine(next(vectors), stored) >= SAME_VECTOR
            each = tuple(next(vectors) for _ in said[row["id"]])
            settled.append(Settled(row["id"], row["version"], SENTENCES_DONE if ours else None, each if ours else ()))
        return settled

    async def _write(self, namespace: str, settled: list[Settled]) -> None:
        """Each entry's state and its sentences' rows, in one transaction."""
        with_rows = [(entry, position, vector) for entry in settled for position, vector in enumerate(entry.vectors)]
        params = {
            "namespace": namespace,
            "ids": [entry.id for entry in settled],
            "versions": [entry.version for entry in settled],
            "states": [entry.state for entry in settled],
            "sentence_ids": [entry.id for entry, _, _ in with_rows],
            "positions": [position for _, position, _ in with_rows],
            "embeddings": [vector for _, _, vector in with_rows],
        }
        async with self._store.connection(namespace) as conn:
            await conn.execute(_SETTLE, params)


def within_texts(
    rows: list[dict[str, Any]], said: Mapping[str, list[str]], most: int = FILL_TEXTS
) -> list[dict[str, Any]]:
    """The first of `rows` whose texts to embed (their sentences, `said` by id, and an entry not known to be the
    model's whole) number `most` at most together; the first always, whatever it has."""
    kept: list[dict[str, Any]] = []
    texts = 0
    for row in rows:
        texts += len(said[row["id"]]) + (row["sentences_state"] == SENTENCES_UNCHECKED)
        if kept and texts > most:
            break
        kept.append(row)
    return kept


def _outcome(entry: Settled) -> str:
    """What became of an entry's sentences: `embedded`, `one` (one sentence) or `none` (not the model's vector)."""
    if entry.state is None:
        return "none"
    return "embedded" if entry.vectors else "one"


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    norms = float(np.linalg.norm(a) * np.linalg.norm(b))
    return float(a @ b) / norms if norms else 0.0
