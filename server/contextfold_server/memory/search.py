"""Search by meaning and words: embed the query (unless the caller did; and each part of a
question that asks several things), fetch in one round trip the candidates the ranking needs
(engine/ranking.py: each store's nearest, each part's, and the entries sharing the query's words),
read the neighbours of the best (in their session, or in their author's order), and rank them."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Iterable, Mapping, Sequence, Set
from dataclasses import dataclass, field, replace
from datetime import UTC
from typing import Any, TypeVar

from ..embedding.batching import BatchingEmbedder
from ..embedding.local import LocalEmbedder
from ..engine import ranking
from ..engine.entries import RetrievedEntry
from ..engine.explain import EXPLAIN_BELOW, MAX_EXPLAINED, MAX_EXPLAINED_CHARS, Considered, Verdict
from ..engine.memory import MemorySearch, SearchQuery, SearchResult
from ..engine.ranking import Ranking
from ..engine.weighing import (
    ENTRY_READ,
    READ_MOST,
    UNKNOWN_NAMES,
    Asked,
    NearCopies,
    Reading,
    Weighing,
    alone,
    content_words,
    default_weighing,
    entry_date,
    on_a_date,
    speakers,
)
from ..errors import InvalidArgument, NotFound
from ..observe.tracing import span
from ..turns import InTurns
from .records import Candidate, Neighbours, Scope, ScoredRecord, is_memory_id
from .reranker import Reranker, RerankFailed
from .store import PostgresMemoryStore

# The model the default ranking's weights were fitted with (engine/weighing.json).
LOCAL_MODEL = LocalEmbedder.name

T = TypeVar("T")
R = TypeVar("R", bound=ScoredRecord)

# What a search returns here: the records themselves, converted for the engine at its port only.
Found = SearchResult[ScoredRecord]


@dataclass
class MemorySearcher:
    store: PostgresMemoryStore
    embedder: BatchingEmbedder
    # The operator's remote reranker, for `RANKING_RERANK`; none configured refuses that ranking.
    reranker: Reranker | None = None
    default_ranking: Ranking = ranking.DEFAULT_RANKING
    # The default ranking's weights and silence threshold (engine/weighing.json).
    weighing: Weighing = field(default_factory=default_weighing)
    # Told each reranker call's outcome: `ok`, or why it failed (`RerankFailed.kind`).
    observe_rerank: Callable[[str], None] = field(default=lambda outcome: None)
    # What the weighing reads in each entry's text, kept from one search to the next (`Readings`).
    readings: Readings = field(default_factory=lambda: Readings())

    async def search(
        self,
        namespace: str,
        scope: Scope,
        query: SearchQuery,
        vector_field: str = "query_vector",
        deadline: float | None = None,
    ) -> Found:
        """The entries the query's ranking puts first across the stores, with the time spent embedding,
        searching and ranking.

        Named stores must exist and match the query's dimension; with no stores
        named, every store of the query's dimension is searched.
        """
        ranked, vector, unsearchable = await self._search(namespace, scope, query, deadline)
        if unsearchable:
            name, dimension = unsearchable[0]
            if dimension is None:
                raise NotFound("store", name)
            # A caller's vector of the wrong length is the caller's field at fault;
            # the server's own embedding of the wrong length means the store does not fit.
            field_name = vector_field if query.vector else "stores"
            raise InvalidArgument.of(field_name, _dimensions_differ(len(vector), name, dimension))
        return ranked

    async def _search(
        self, namespace: str, scope: Scope, query: SearchQuery, deadline: float | None = None
    ) -> tuple[Found, tuple[float, ...], list[tuple[str, int | None]]]:
        """The search, the vector it searched with (the caller's, or the query's embedding), and the
        named stores it could not search: each with its dimension, None for one that does not exist.
        The stores are checked from the same round trip as the search itself, which searches only the
        stores of the query's dimension. `deadline` (the event loop's clock) bounds the reranker's wait."""
        durations: dict[str, float] = {}
        started = time.perf_counter()
        # The silence gate's threshold was fitted on the local model's similarities: another model's (a
        # caller's vector, an operator's embedding service) are on a scale of their own.
        query = replace(query, gate=query.gate and not query.vector and self.embedder.name == LOCAL_MODEL)
        strategy = query.ranking or self.default_ranking
        # Entries' sentences were embedded by the server's model: a query in its space (not a caller's vector) finds
        # entries by them too, under the default.
        by_sentence = ranking.SENTENCE_CANDIDATES if strategy is Ranking.STORE_AWARE and not query.vector else 0
        # Within one store, standing out from its crowd orders entries as similarity does: without words
        # to weigh, one nearest-neighbour query finds them.
        words = bool(query.text.strip())
        nearest_only = strategy is Ranking.SIMILARITY or (
            strategy is Ranking.STORE_AWARE and len(query.stores) == 1 and not words
        )
        # Dates named by when they are asked ("yesterday") are read against the day the caller says it is
        # asked (a conversation replayed), else the call's own, in UTC.
        asked_at = query.asked_time or self.store.now()
        text, today = "" if nearest_only else query.text, asked_at.astimezone(UTC).date()
        # A long question is read on the thread: 16,000 characters naming dates take 50 ms to read.
        question = await self._off_the_loop(namespace, len(text) <= QUESTION_ON_THE_LOOP, Asked.of, text, today)
        # A question asking several things is searched for each as well, by vectors of the server's own model
        # (beside a caller's vector, a part's would be another model's).
        parts = question.parts if strategy is Ranking.STORE_AWARE and not query.vector else ()
        part_vectors: list[list[float]] = []
        if not query.vector:
            with span("contextfold.embed", model=self.embedder.name):
                vector, *part_vectors = await self.embedder.embed([query.text, *parts], tenant=namespace)
            query = replace(query, vector=tuple(vector))
            durations["embed"] = time.perf_counter() - started
        searching = time.perf_counter()
        with span("contextfold.search", stores=len(query.stores), limit=query.limit, ranking=strategy.value):
            if nearest_only:
                # Explaining, the search reads a few past the cut, and those below `min_score`, to show them.
                asked = replace(query, limit=query.limit + EXPLAIN_BELOW, min_score=None) if query.explain else query
                known, records = await self.store.search(namespace, scope, asked)
            else:
                # Words to match need words: a query given only as a vector has no lexical candidates.
                lexical = ranking.LEXICAL_CANDIDATES if words else 0
                per_store = ranking.candidates_per_store(strategy, query.limit)
                # Hybrid fuses by rank the entries holding the query's rare words (an id, a code); the default
                # weighs every word an entry shares (BM25).
                matches = "rare_word_matches" if strategy is Ranking.HYBRID else "word_matches"
                # Whether the scope has heard of what the question names: the default ranking's to weigh.
                names = question.names if strategy is Ranking.STORE_AWARE else ()
                # The default reads the neighbours of the nearest and the word matches with them, the best of
                # which it weighs (`_store_aware`).
                seeds = ranking.NEIGHBOURS_OF * query.limit if strategy is Ranking.STORE_AWARE else 0
                known, candidates, unknown_names, ahead, entries = await self.store.candidates(
                    namespace,
                    scope,
                    query,
                    per_store,
                    ranking.POOL_CANDIDATES,
                    lexical,
                    matches,
                    names,
                    part_vectors,
                    seeds,
                    by_sentence,
                )
        durations["search"] = time.perf_counter() - searching
        unsearchable = [(name, known.get(name)) for name in query.stores if known.get(name) != len(query.vector)]
        left_out = tuple(_left_out(name, dimension, len(query.vector)) for name, dimension in unsearchable)
        if nearest_only:
            considered: list[Considered] = []
            if query.explain:
                weighed = records
                records = [r for r in records if query.min_score is None or r.score >= query.min_score][: query.limit]
                considered = _considered(weighed, records, {}, {}, query)
            found = Found(records, durations, left_out, ranking=strategy, considered=considered)
            return found, query.vector, unsearchable
        ranking_started = time.perf_counter()
        found = await self._rank(
            strategy, query, candidates, deadline, namespace, scope, question, unknown_names, ahead, entries
        )
        durations["rank"] = time.perf_counter() - ranking_started
        found.durations, found.left_out = durations, left_out
        return found, query.vector, unsearchable

    async def _rank(
        self,
        strategy: Ranking,
        query: SearchQuery,
        candidates: list[Candidate],
        deadline: float | None,
        namespace: str,
        scope: Scope,
        asked: Asked,
        unknown_names: float,
        ahead: Neighbours,
        entries: int | None,
    ) -> Found:
        """`candidates` (each store's nearest, and the lexical matches) ranked by `strategy`: the best
        `query.limit`, none below `query.min_score`, none a near-copy of a better one, and when the query
        asks for the gate (and names no `min_score`), under the default ranking none that is not relevant
        enough (`Weighing.relevant`; `unknown_names`: the share of `asked.names` the scope holds none of;
        `entries`: how many the scope holds, which `Weighing.least_for` reads);
        with the strategy that ranked them and why it is not the one asked for. A reranker that fails
        leaves the store-aware order. Explaining, what each signal added to each candidate's score
        (`Found.considered`)."""
        nearest = [c for c in candidates if c.lexical is None and not c.part and c.sentence is None]
        words = sorted((c for c in candidates if c.lexical is not None), key=lambda c: -(c.lexical or 0.0))
        by_sentence = [c for c in candidates if c.sentence is not None]
        parts: dict[int, list[Candidate]] = {}
        for candidate in candidates:
            if candidate.part:
                parts.setdefault(candidate.part, []).append(candidate)
        order: list[Candidate]
        signals: dict[str, dict[str, float]] = {}
        inputs: dict[str, dict[str, float]] = {}
        scores: dict[str, float] = {}
        gate_scores: dict[str, float] = {}
        under_floor: set[str] = set()
        likest: tuple[float, float] | None = None
        if strategy is Ranking.HYBRID:
            order = ranking.hybrid(nearest, words, len({c.id for c in candidates}))
            if query.explain:
                scores, signals = _hybrid_signals(nearest, words)
        else:
            order, scores, gate_scores, under_floor, likest = await self._store_aware(
                namespace,
                scope,
                query,
                nearest,
                words,
                asked,
                unknown_names,
                signals,
                inputs,
                ahead,
                list(parts.values()),
                entries,
                by_sentence,
            )
        gated = strategy is Ranking.STORE_AWARE and query.gate and query.min_score is None
        gate = self.weighing if gated else None
        left_out = await self._off_the_loop(
            namespace, _read(order) <= READ_ON_THE_LOOP, _left_out_of,
            order, gate_scores, under_floor, likest, query.limit, gate, unknown_names, asked,
        )  # fmt: skip
        weighed = order
        order = [entry for entry in order if entry.id not in left_out]
        if query.min_score is not None:
            order = [entry for entry in order if entry.score >= query.min_score]
        notes: tuple[str, ...] = ()
        # The candidates were read cut: those that may be shown, and those a reranker reads, are read whole, once.
        shown = max(query.limit, ranking.RERANK_CANDIDATES) if strategy is Ranking.RERANK else query.limit
        order = await self._whole(namespace, scope, query, order[:shown])
        if strategy is Ranking.RERANK:
            pool = order[: ranking.RERANK_CANDIDATES]
            try:
                order, reranked = await self._rerank(query.text, pool, deadline)
                self.observe_rerank("ok")
                for entry, score in reranked.items():
                    signals.setdefault(entry, {})["rerank"] = score
                weighed = [*order, *(entry for entry in weighed if entry.id not in reranked)]
            except RerankFailed as error:
                self.observe_rerank(error.kind)
                strategy, notes = Ranking.STORE_AWARE, (f"the reranker failed ({error}): ranked store-aware",)
        # Found both ways, an entry is the vector search's: its score is its similarity either way.
        ranked = [ScoredRecord(entry.memory, entry.score) for entry in order[: query.limit]]
        considered = _considered(weighed, ranked, scores, signals, query, inputs, left_out) if query.explain else []
        silence = ""
        best = left_out.get(weighed[0].id) if weighed and not ranked else None
        if best is not None and best[0] is Verdict.NOT_RELEVANT:
            silence = f"no entry is relevant enough: {best[1]}"
        return Found(ranked, notes=notes, ranking=strategy, considered=considered, silence=silence)

    async def _store_aware(
        self,
        namespace: str,
        scope: Scope,
        query: SearchQuery,
        nearest: list[Candidate],
        words: list[Candidate],
        asked: Asked,
        unknown_names: float,
        signals: dict[str, dict[str, float]],
        inputs: dict[str, dict[str, float]],
        ahead: Neighbours,
        parts: Sequence[list[Candidate]],
        entries: int | None,
        by_sentence: Sequence[Candidate] = (),
    ) -> tuple[list[Candidate], dict[str, float], dict[str, float], set[str], tuple[float, float] | None]:
        """Each candidate weighed by its signals (`weighing`): its similarity, its lead over its store's
        crowd and its share of the query's words (`ranking`), then, once the best ones' neighbours
        are read, a better neighbour and a better entry in its session (each measured by the
        pre-weighing score, `ranking.with_words`), how far it is behind the best candidate, a date
        the question names, a speaker the question names, the share of its sentences that state rather
        than ask (`states`), and how much better the turn just before it in its session is, when that
        one asks (`answers`: the reply to a question put nearer the query). An entry in no session
        has for neighbours the entries its author (its user and agent) wrote just before and after it
        in its store, also in none: turns stored without a session's id. Its neighbour and the turn
        before it are weighed by signals of their own (`written_neighbour`, `written_answers`): write
        order is a weaker kinship than a session, and where no author is known it means nothing (a
        store filled by an import has no neighbours read). Best first, with the scores, the silence
        gate's scores (`Weighing.gate_score`), the entries under its floor (`Weighing.under_floor`), and, when
        no candidate is as like the question as the gate's `least` for a scope of `entries`
        (`Weighing.reaches_least`), the likest one's similarity and that least (else None).
        Explaining, what each signal added goes in `signals` and their values in `inputs`, by id.

        A question asking several things (`parts`: each part's nearest) is answered part by part: an
        entry stands out by the part it answers best (its similarity to that part, its lead over that
        part's crowd), and each part's best entry comes first (`each_part_first`).

        The entries found by their best sentence (`by_sentence`) are weighed with the rest, and each of them by how
        much nearer its best sentence is than itself (`sentence`): a turn that says several things, one of which
        the question asks about."""
        found = {c.id: c for c in (*by_sentence, *words, *nearest)}
        crowds = ranking.crowds(nearest)
        standing = ranking.stand_out([*nearest, *words, *by_sentence], crowds)
        sentences = {c.id: c.sentence for c in by_sentence if c.sentence is not None}
        for part in parts:
            for entry, stands in ranking.stand_out(part, ranking.crowds(part)).items():
                standing[entry] = max(standing.get(entry, stands), stands)
            for candidate in part:
                if candidate.id not in found or candidate.score > found[candidate.id].score:
                    found[candidate.id] = candidate
        lexical = {c.id: c.lexical or 0.0 for c in words}
        worded = ranking.with_words(standing, lexical)
        best = sorted(worded, key=lambda entry: -worded[entry])[: ranking.NEIGHBOURS_OF * query.limit]
        beside: dict[str, set[str]] = {}
        # Entries of no session and no author have no neighbours: none to read.
        placed = [entry for entry in best if found[entry].memory.scope.has_neighbours]
        if placed:
            # Read ahead with the candidates, unless one of the best was not among those whose were.
            neighbours, beside = ahead.of(placed)
            if not ahead.covered.issuperset(placed):
                neighbours, beside = await self.store.neighbours(namespace, scope, query, placed)
            for neighbour in neighbours:
                found.setdefault(neighbour.id, neighbour)
            worded = ranking.with_words(ranking.stand_out(neighbours, crowds), {}) | worded
        top = max((c.score for c in found.values()), default=0.0)
        sessions = ranking.best_in_session(worded, {c.id: _session(c) for c in found.values()})
        weigh = functools.partial(
            _weigh, found, worded, beside, crowds, lexical, sessions, top, asked, self.weighing, query.explain,
            unknown_names, signals, inputs, entries, functools.partial(self.readings.of, namespace), sentences,
        )  # fmt: skip
        scores, gate_scores, under_floor, likest = await self._off_the_loop(
            namespace, _read(found.values()) <= READ_ON_THE_LOOP, weigh
        )
        order = sorted(found.values(), key=lambda c: -scores[c.id])
        first = each_part_first(order, [{c.id for c in part} for part in parts])
        return first, scores, gate_scores, under_floor, likest

    async def _off_the_loop(self, namespace: str, small: bool, work: Callable[..., T], *args: Any) -> T:
        """`work(*args)`: on the event loop when it is `small` (a short question, candidates short and few), else on
        the worker's thread, in `namespace`'s turn (`turns.worker_thread`)."""
        return work(*args) if small else await InTurns(namespace)(work, *args)

    async def _whole(self, namespace: str, scope: Scope, query: SearchQuery, entries: Sequence[R]) -> list[R]:
        """`entries` (candidates, read up to the `READ_MOST` characters the weighing reads of each) with their content
        whole: those that may hold more are read again, in one round trip. One gone since (deleted, expired, no
        longer matching) is left out; one changed since is as it is now."""
        cut = {entry.id for entry in entries if len(entry.memory.content) >= READ_MOST}
        if not cut:
            return list(entries)
        whole = await self.store.whole(namespace, scope, query, sorted(cut))
        return [
            replace(entry, memory=whole[entry.id]) if entry.id in cut else entry
            for entry in entries
            if entry.id not in cut or entry.id in whole
        ]

    async def _rerank(
        self, text: str, pool: list[Candidate], deadline: float | None
    ) -> tuple[list[Candidate], dict[str, float]]:
        """`pool` in the reranker's order, with its score for each entry it scored, by id."""
        assert self.reranker is not None  # the request's parse refused RANKING_RERANK otherwise
        if not text.strip():
            raise RerankFailed("a query given only as a vector has no text to rerank with", "no_text")
        if not pool:
            return pool, {}
        timeout = None if deadline is None else deadline - asyncio.get_running_loop().time()
        with span("contextfold.rerank", candidates=len(pool)):
            scores = await self.reranker.rerank(text, [entry.content for entry in pool], timeout)
        by_id = {pool[index].id: score for index, score in scores.items() if 0 <= index < len(pool)}
        return ranking.reorder(pool, scores, len(pool)), by_id

    def port(self, namespace: str, scope: Scope, deadline: float | None = None) -> MemorySearch:
        """The engine's `MemorySearch` port, bound to one caller's namespace and scope; `deadline` (the
        event loop's clock) bounds the reranker's wait. A store that cannot be searched leaves itself
        out, not the others."""

        async def search(query: SearchQuery) -> SearchResult[RetrievedEntry]:
            # Ids a conversation claims that no entry could have cannot match anything.
            query = replace(query, exclude_ids=frozenset(filter(is_memory_id, query.exclude_ids)))
            found, _, _ = await self._search(namespace, scope, query, deadline)
            entries = [_entry(record) for record in found.entries]
            return SearchResult(
                entries, found.durations, found.left_out, found.notes, found.ranking, found.considered, found.silence
            )

        return search


# The longest question read on the event loop (`Asked.of`: its words, dates, names and parts; about 1 ms at most).
QUESTION_ON_THE_LOOP = 1000

# What the ranking may read of its candidates on the event loop, in characters (of each, up to `ENTRY_READ`):
# about 2 ms of weighing them and of comparing those kept for near-copies. More (a question of 100 entries among
# long ones reads 500 candidates: tens of milliseconds) is read on the worker's thread, in turns per tenant,
# where the loop's other callers take turns with it (the interpreter's switch interval) rather than waiting until
# it is done.
READ_ON_THE_LOOP = 100_000


# The most entries' readings a searcher (one per worker) keeps. A reading holds a few numbers, the distinct
# capitalised words of the first `ENTRY_READ` characters and those characters (a few hundred bytes for a
# conversation's turn, 8 kB at most), so the cache stays within tens of megabytes; full, it is emptied and fills
# again.
READINGS_KEPT = 4096


@dataclass
class Readings:
    """Each entry's `Reading`, kept by its tenant, id, row (`seq`) and version, so that an entry weighed again (a
    conversation's turns come back question after question) is not read again: an update or a delete and add
    gives it a new key, and one tenant's entries are never another's. Reading a LoCoMo question's fifty-odd
    candidates again took 0.4 ms of its weighing's 1.1 ms (docs/injection.md). Safe from the loop and the worker's
    thread at once (a race reads an entry twice)."""

    kept: dict[tuple[str, str, int, int], Reading] = field(default_factory=dict)

    def of(self, namespace: str, candidate: Candidate) -> Reading:
        memory = candidate.memory
        key = (namespace, memory.id, memory.seq, memory.version)
        reading = self.kept.get(key)
        if reading is None:
            if len(self.kept) >= READINGS_KEPT:
                self.kept.clear()
            reading = self.kept[key] = Reading.of(memory.content)
        return reading


def _read(candidates: Iterable[Candidate]) -> int:
    """The characters the ranking reads of `candidates` (of each, up to `ENTRY_READ`)."""
    return sum(min(len(c.content), ENTRY_READ) for c in candidates)


def _weigh(
    found: Mapping[str, Candidate],
    worded: Mapping[str, float],
    beside: Mapping[str, set[str]],
    crowds: Mapping[str, float],
    lexical: Mapping[str, float],
    sessions: Mapping[str, float],
    top: float,
    asked: Asked,
    weighing: Weighing,
    explain: bool,
    unknown_names: float,
    signals: dict[str, dict[str, float]],
    inputs: dict[str, dict[str, float]],
    entries: int | None,
    read: Callable[[Candidate], Reading],
    sentences: Mapping[str, float],
) -> tuple[dict[str, float], dict[str, float], set[str], tuple[float, float] | None]:
    """Each of `found` weighed by its signals (`MemorySearcher._store_aware`): its score, its gate score, and
    whether it is under the gate's floor; and, when none is as like the question as the gate's `least` for a
    scope of `entries` (`Weighing.reaches_least`), the likest one's similarity and that least (else None).
    Explaining, what each signal added goes in `signals`, their values in `inputs`, by id. Each entry's text is
    read by `read` (`Readings.of`, which keeps what it read); `sentences` holds the best sentence's similarity of
    those found by their sentences."""
    scores: dict[str, float] = {}
    gate_scores: dict[str, float] = {}
    under_floor: set[str] = set()
    reached = False
    readings = {entry: read(candidate) for entry, candidate in found.items()}
    people = speakers(readings.values())
    # Echoes are counted among the best candidates by their standing before the weighing (`alone`), and weigh an
    # entry in no session only: in a session, a topic come back to is the conversation keeping to it (a multi-hop
    # question's evidence is often several turns of one topic), where notes in none retell it (docs/injection.md).
    # Weighed for entries in no session only: a question whose candidates are all in one needs none counted.
    lonely: dict[str, float] = {}
    if any(not candidate.memory.scope.session_id for candidate in found.values()):
        standing = sorted(readings, key=lambda entry: -worded[entry])
        lonely = dict(zip(standing, alone([readings[e].topic for e in standing], weighing.echo_share), strict=True))
    for entry, candidate in found.items():
        own = worded[entry]
        before = [n for n in beside.get(entry, ()) if n in worded and found[n].memory.seq < candidate.memory.seq]
        neighbouring = max([0.0, *(worded[n] - own for n in beside.get(entry, ()) if n in worded)])
        # The reply to a question nearer to the query than itself: "What are their names?" "Luna and Oliver!"
        answering = max([0.0, *((worded[n] - own) * (1.0 - readings[n].states) for n in before)])
        # Beside it in its session, or (in none) in the order its author wrote: two signals each, fitted apart.
        in_session = bool(candidate.memory.scope.session_id)
        values = {
            "similarity": candidate.score,
            "lead": candidate.score - crowds.get(candidate.store, candidate.score),
            "words": lexical.get(entry, 0.0),
            "neighbour": neighbouring if in_session else 0.0,
            "behind_best": candidate.score - top,
            "date": on_a_date(asked.dates, entry_date(candidate.memory.metadata, candidate.memory.create_time)),
            "speaker": readings[entry].speaker_named(asked.words),
            "session": sessions.get(entry, own) - own,
            "standing": own,
            "states": readings[entry].states,
            "answers": answering if in_session else 0.0,
            "written_neighbour": 0.0 if in_session else neighbouring,
            "written_answers": 0.0 if in_session else answering,
            "specific": readings[entry].specific(people),
            "sentence": max(0.0, sentences[entry] - candidate.score) if entry in sentences else 0.0,
            "alone": 1.0 if in_session else lonely[entry],
        }
        scores[entry] = weighing.score(values)
        gate_scores[entry] = weighing.gate_score(values)
        if weighing.under_floor(values):
            under_floor.add(entry)
        reached = reached or weighing.reaches_least(values, entries)
        if explain:
            signals[entry] = weighing.contributions(values) | {"intercept": weighing.intercept}
            inputs[entry] = values | {UNKNOWN_NAMES: unknown_names}
    if reached or not found:
        return scores, gate_scores, under_floor, None
    return scores, gate_scores, under_floor, (top, weighing.least_for(entries))


def _session(candidate: Candidate) -> tuple[str, str] | None:
    """The session an entry was written in (its store's), None for none."""
    session = candidate.memory.scope.session_id
    return (candidate.store, session) if session else None


def _entry(found: ScoredRecord) -> RetrievedEntry:
    """A record as the engine sees it: the one conversion, at the port."""
    memory = found.memory
    return RetrievedEntry(
        id=memory.id,
        store=memory.store,
        content=memory.content,
        score=found.score,
        metadata=memory.metadata,
        created_at=memory.create_time,
    )


def _hybrid_signals(
    nearest: list[Candidate], words: list[Candidate]
) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """Under hybrid: each candidate's fused score (what its order follows), and its words' weight."""
    fused = ranking.fused_scores(ranking.hybrid_lists(nearest, words))
    signals = {entry: {"fused": score} for entry, score in fused.items()}
    for candidate in words:
        signals[candidate.id]["lexical"] = candidate.lexical or 0.0
    return fused, signals


def _considered(
    weighed: Sequence[ScoredRecord],
    returned: Sequence[ScoredRecord],
    scores: Mapping[str, float],
    signals: Mapping[str, dict[str, float]],
    query: SearchQuery,
    inputs: Mapping[str, dict[str, float]] | None = None,
    left_out: Mapping[str, tuple[Verdict, str]] | None = None,
) -> list[Considered]:
    """The best `MAX_EXPLAINED` of what the ranking weighed, in its order, each with its signals (and
    their values, `inputs`); those the ranking left out (`left_out`: not relevant, a near-copy), those
    below `min_score` and those ranked past what the search returns (`returned`) already decided."""
    inputs, left_out = inputs or {}, left_out or {}
    kept = {entry.memory.id for entry in returned}
    considered: list[Considered] = []
    for rank, entry in enumerate(weighed[:MAX_EXPLAINED], start=1):
        memory = entry.memory
        candidate = Considered(
            memory.id,
            memory.store,
            memory.content[:MAX_EXPLAINED_CHARS],
            scores.get(memory.id, entry.score),
            entry.score,
            rank,
            signals.get(memory.id, {}),
            inputs.get(memory.id, {}),
        )
        if memory.id in left_out:
            candidate.decide(*left_out[memory.id])
        elif memory.id not in kept and query.min_score is not None and entry.score < query.min_score:
            candidate.decide(Verdict.BELOW_MIN_SCORE, f"similarity {entry.score:.3f} is under {query.min_score}")
        elif memory.id not in kept:
            candidate.decide(Verdict.RANKED_BELOW, f"ranked {rank}, after the {len(kept)} best")
        considered.append(candidate)
    return considered


def each_part_first(order: Sequence[Candidate], parts: Sequence[set[str]]) -> list[Candidate]:
    """`order` (best first) with the best entry of each part of a question (`parts`: the ids each part's
    search found) first, in their own order: five slots are not all spent on the part most entries are
    alike for, while another part's answer waits below them."""
    leaders: list[Candidate] = []
    for ids in parts:
        best = next((candidate for candidate in order if candidate.id in ids), None)
        if best is not None and best not in leaders:
            leaders.append(best)
    if not leaders:
        return list(order)
    return [*sorted(leaders, key=order.index), *(candidate for candidate in order if candidate not in leaders)]


def _left_out_of(
    order: Sequence[Candidate],
    gate_scores: Mapping[str, float],
    under_floor: Set[str],
    likest: tuple[float, float] | None,
    limit: int,
    gate: Weighing | None,
    unknown_names: float,
    asked: Asked,
) -> dict[str, tuple[Verdict, str]]:
    """The candidates of `order` (best first) the ranking leaves out, each with its verdict and why:
    with `gate`, those not relevant enough by their `gate_scores`, or `under_floor`, or all of them when
    no candidate is as like the question as the gate's `least` (`likest`: the likest one's similarity and
    that least, None when one is), every one, to say why; among the best `limit` kept, a near-copy of a
    better one (`weighing.near_copy`)."""
    left_out: dict[str, tuple[Verdict, str]] = {}
    kept: list[Candidate] = []
    copies = NearCopies()
    for candidate in order:
        score = gate_scores.get(candidate.id, candidate.score)
        floored = candidate.id in under_floor
        if gate is not None and (floored or not gate.relevant(score, unknown_names)):
            why = _not_relevant(gate, score, candidate.score if floored else None, unknown_names, asked)
            left_out[candidate.id] = (Verdict.NOT_RELEVANT, why)
        elif gate is not None and likest is not None:
            why = f"the question is about no entry: the likest's similarity {likest[0]:.2f} is under {likest[1]:.2f}"
            left_out[candidate.id] = (Verdict.NOT_RELEVANT, why)
        elif len(kept) < limit:
            copied = copies.copy_of(content_words(candidate.content))
            if copied is not None:
                left_out[candidate.id] = (Verdict.NEAR_COPY, f"says what {kept[copied].id} says")
            else:
                kept.append(candidate)
    return left_out


def _not_relevant(gate: Weighing, score: float, similarity: float | None, unknown_names: float, asked: Asked) -> str:
    """Why the gate left out a candidate of this gate score (`similarity`: of one under its floor): what fell
    short of what."""
    reasons = []
    if not gate.relevant(score, unknown_names):
        named = ""
        if unknown_names:
            held = ", ".join(asked.names)
            named = f", less {gate.unknown_names * unknown_names:.2f} as the scope holds none of {held}"
            named = named if unknown_names == 1 else f"{named} (not all)"
        reasons.append(f"relevance {score:.2f}{named} is under the threshold {gate.threshold:.2f}")
    if similarity is not None:
        reasons.append(f"similarity {similarity:.2f} is under the floor {gate.floor:.2f}")
    return "; ".join(reasons)


def _left_out(name: str, dimension: int | None, query_dimension: int) -> str:
    if dimension is None:
        return f"store {name!r} does not exist"
    return f"store {name!r} was left out: {_dimensions_differ(query_dimension, name, dimension)}"


def _dimensions_differ(query_dimension: int, store: str, store_dimension: int) -> str:
    return f"the query vector has {query_dimension} dimensions; store {store!r} has {store_dimension}"
