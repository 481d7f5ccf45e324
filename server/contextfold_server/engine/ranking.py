"""Which of the candidates a search found go to the model, in what order.

One global similarity ranking lets a large store of loosely related entries
(small talk, stand-up notes) take every place with near-misses: each of its
hundreds of entries is a little similar to any query. What marks the entry a
person would pick is that it stands out from the entries around it. So the
default ranking (`STORE_AWARE`) judges each entry against its own store's crowd
for this query, and the crowd is read per store, not from the top of a list a
large store fills. Words count beside meaning: names, places, dates and ids
carry what an embedding blurs, so the default weighs the share of the query's
words an entry holds (BM25, rare words weighing more), and an entry written
beside a better one in its session (a reply to the question that names what it
answers), or in none, by its author just before or after a better one, is lifted by
it. How much each of these counts is learnt (engine/weighing.py); here are the
signals themselves, and the score that decides whose neighbours are read
(`with_words`). bench/retrieval.py measures
every strategy on labelled sets of our own, bench/locomo.py on long real
conversations; docs/injection.md has the tables.

These are pure functions over candidates already fetched: the search fetches
what the strategy needs (`candidates_per_store`, `LEXICAL_CANDIDATES`, `POOL_CANDIDATES`).
"""

from __future__ import annotations

import enum
from collections import defaultdict
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Protocol, TypeVar


class Ranked(Protocol):
    """What a ranking weighs: an entry's id, its store, and its similarity to the query. The engine's
    `RetrievedEntry` is one; so is what a search reads (memory/records.py), ranked before it is converted."""

    @property
    def id(self) -> str: ...

    @property
    def store(self) -> str: ...

    @property
    def score(self) -> float: ...


Entry = TypeVar("Entry", bound=Ranked)


class Ranking(enum.Enum):
    SIMILARITY = "similarity"
    STORE_AWARE = "store_aware"
    HYBRID = "hybrid"
    RERANK = "rerank"


DEFAULT_RANKING = Ranking.STORE_AWARE

# An entry's crowd is its store's entry this many places below the store's best
# (the eighth best): near it, an entry is one of many alike; well above it, it
# stands out. Measured over 5 to 10 on bench/retrieval (a plateau from 6 to 8).
CROWD_RANK = 7
# How much standing out counts beside the similarity itself, in the score that chooses whose session
# neighbours are read and that the neighbour and session signals compare (the default's own weights are
# learnt: engine/weighing.json).
STAND_OUT_WEIGHT = 2.0
# Reciprocal rank fusion's constant (the usual 60): ranks near the top count most, no one list dominates.
RRF_K = 60
# Fused by rank, the lexical list weighs as much as the vector list: an entry holding the query's one
# rare word (an incident id) then comes first unless several entries rank well in both lists. At half
# the weight, an exact id several places down the vector list stayed there (tests/test_ranking.py).
LEXICAL_WEIGHT = 1.0
# How much the query's words count beside the stand-out score: an entry's share of them (BM25 against one
# holding every word once; `word_matches`) times this. Chosen on LoCoMo's development split and our own
# sets together (bench/locomo.py, bench/retrieval.py): 1.0 to 2.0 lift LoCoMo's recall@5 by 0.15 to 0.18;
# past 1.5 our assistant set loses more than a query.
WORD_WEIGHT = 1.5
# The best entries whose neighbours (in their session, or their author's order) are read, as a multiple of the
# entries asked for.
NEIGHBOURS_OF = 2
# The entries nearest across the stores read first when a large store is searched: one with
# `candidates_per_store` of them (the store a query's near-misses come from) needs no reading of its own.
POOL_CANDIDATES = 40
# Entries the lexical search contributes, and the candidates a reranker is asked to order.
LEXICAL_CANDIDATES = 20
RERANK_CANDIDATES = 20
# Entries the default finds by their best sentence (memory/sentences.py): a LoCoMo conversation's twenty nearest by
# sentence hold more of a question's evidence than its thirty nearest by turn (bench/sentences.py).
SENTENCE_CANDIDATES = 20


def candidates_per_store(ranking: Ranking, limit: int) -> int:
    """Entries to fetch from each store, nearest first: enough to see each store's crowd, and at
    least `limit` (all from one store may win); 0 for `SIMILARITY`, which ranks one global list."""
    if ranking is Ranking.SIMILARITY:
        return 0
    wanted = RERANK_CANDIDATES if ranking is Ranking.RERANK else limit
    return max(wanted, CROWD_RANK + 1)


def by_similarity(entries: Iterable[Entry], limit: int) -> list[Entry]:
    """The `limit` most similar entries, whichever store holds them. Ties keep their given order."""
    return sorted(entries, key=lambda entry: entry.score, reverse=True)[:limit]


def stand_out_scores(entries: Iterable[Ranked], others: Iterable[Ranked] = ()) -> dict[str, float]:
    """Each entry's similarity plus `STAND_OUT_WEIGHT` times its lead over its store's crowd (`crowds`),
    by id; `others` (found another way) are judged against the crowds of `entries`.

    `entries` must hold each store's nearest entries, as many as `candidates_per_store` asks for: a
    store's crowd is read from its own candidates."""
    entries = list(entries)
    return stand_out([*entries, *others], crowds(entries))


def crowds(entries: Iterable[Ranked]) -> dict[str, float]:
    """Each store's crowd for this query: the similarity of its `CROWD_RANK`-th entry after its best
    among `entries` (its nearest), or of its last when it has fewer."""
    stores: dict[str, list[float]] = defaultdict(list)
    for entry in entries:
        stores[entry.store].append(entry.score)
    return {store: sorted(scores, reverse=True)[min(CROWD_RANK, len(scores) - 1)] for store, scores in stores.items()}


def stand_out(entries: Iterable[Ranked], crowds: Mapping[str, float]) -> dict[str, float]:
    """Each entry's similarity plus `STAND_OUT_WEIGHT` times its lead over its store's crowd, by id (the
    first of an id counts); in a store with no crowd, an entry is its own."""
    scores: dict[str, float] = {}
    for entry in entries:
        crowd = crowds.get(entry.store, entry.score)
        scores.setdefault(entry.id, entry.score + STAND_OUT_WEIGHT * (entry.score - crowd))
    return scores


def with_words(scores: Mapping[str, float], words: Mapping[str, float]) -> dict[str, float]:
    """`scores` plus `WORD_WEIGHT` times each entry's share of the query's words (`words`, by id; an
    entry sharing none adds nothing)."""
    return {entry: score + WORD_WEIGHT * words.get(entry, 0.0) for entry, score in scores.items()}


def best_in_session(scores: Mapping[str, float], sessions: Mapping[str, Hashable | None]) -> dict[str, float]:
    """For each entry in a session (`sessions`: its session by id, None for none), the best score among
    its session's entries, its own included."""
    best: dict[Hashable, float] = {}
    for entry, session in sessions.items():
        if session is not None and entry in scores:
            best[session] = max(best.get(session, scores[entry]), scores[entry])
    return {entry: best[session] for entry, session in sessions.items() if session is not None and session in best}


def store_aware(entries: Sequence[Entry], limit: int) -> list[Entry]:
    """The `limit` entries that stand out most from their stores' crowds (`stand_out_scores`), so a
    large store's near-misses cannot crowd out a small store's one clear match."""
    scores = stand_out_scores(entries)
    return sorted(entries, key=lambda entry: scores[entry.id], reverse=True)[:limit]


def fused_scores(lists: Iterable[tuple[Sequence[Ranked], float]]) -> dict[str, float]:
    """Reciprocal rank fusion's scores, by id: each entry scores weight / (`RRF_K` + rank) in every list
    holding it. Lists are (entries best first, weight)."""
    scores: dict[str, float] = defaultdict(float)
    for ranked, weight in lists:
        for rank, entry in enumerate(ranked, start=1):
            scores[entry.id] += weight / (RRF_K + rank)
    return dict(scores)


def fuse_by_rank(lists: Iterable[tuple[Sequence[Entry], float]], limit: int) -> list[Entry]:
    """The `limit` best by reciprocal rank fusion (`fused_scores`); an entry in several lists appears once."""
    lists = list(lists)
    scores = fused_scores(lists)
    found: dict[str, Entry] = {}
    for ranked, _ in lists:
        for entry in ranked:
            found.setdefault(entry.id, entry)
    return sorted(found.values(), key=lambda entry: scores[entry.id], reverse=True)[:limit]


def hybrid(entries: Sequence[Entry], lexical: Sequence[Entry], limit: int) -> list[Entry]:
    """The store-aware order fused by rank with the full-text search's (best first), the lexical
    list at `LEXICAL_WEIGHT`: exact words (an id, an error message) lift the entries holding them."""
    return fuse_by_rank(hybrid_lists(entries, lexical), limit)


def hybrid_lists(entries: Sequence[Entry], lexical: Sequence[Entry]) -> list[tuple[Sequence[Entry], float]]:
    """What hybrid fuses: the store-aware order of `entries`, and the lexical list at `LEXICAL_WEIGHT`."""
    return [(store_aware(entries, len(entries)), 1.0), (lexical, LEXICAL_WEIGHT)]


def reorder(entries: Sequence[Entry], scores: Mapping[int, float], limit: int) -> list[Entry]:
    """`entries` ordered by a reranker's scores (by position in `entries`); entries it did not score
    follow in their given order."""
    positions = sorted(range(len(entries)), key=lambda index: (index not in scores, -scores.get(index, 0.0), index))
    return [entries[index] for index in positions][:limit]
