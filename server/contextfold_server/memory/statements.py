"""The SQL of memory's reads and writes, composed from the caller's values' shape (never their values).

Each builder returns statement text that depends only on a request's shape (a dimension, the
parts of a filter, whether a scope is set); every value goes as a parameter. So the same shape
sends the same text, which psycopg prepares once and Postgres plans per values.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Sequence
from datetime import timedelta
from typing import Any

import numpy as np
from psycopg import sql
from psycopg.types.json import Jsonb

from ..engine.filters import Filter
from ..engine.weighing import READ_MOST
from ..postgres.schema import SCHEMA
from .filters import anchor, compile_filter
from .records import MemoryRecord, NewMemory, Scope

# Enough candidates per probe that filtered searches stay accurate, and pgvector
# 0.8's iterative scan keeps probing when a scope filter discards candidates.
# Statements psycopg prepares are planned for their values on every execution: a
# generic plan knows neither the limit nor the scope's values, so it could not pick,
# call by call, a narrow scope's own index or the vector index for a broad one.
SEARCH_SETTINGS = (
    "SET hnsw.ef_search = 100; SET hnsw.iterative_scan = relaxed_order; SET plan_cache_mode = force_custom_plan"
)

MEMORY_COLUMNS = (
    "id, store, content, metadata, user_id, agent_id, session_id, create_time, seq, update_time, expire_time, version"
)
# An entry is returned until it expires: the caller's clock (`%(live_at)s`) is past its expiry from that moment.
LIVE = " AND (m.expire_time IS NULL OR m.expire_time > %(live_at)s)"
# The columns of an entry's version, as `memory_versions` keeps them.
VERSIONED_COLUMNS = "store, content, metadata, user_id, agent_id, session_id, create_time, update_time, expire_time"


def memory_from_row(row: dict[str, Any], etag_key: bytes) -> MemoryRecord:
    """The entry a row holds (`MEMORY_COLUMNS`; its metadata as the driver read it, or as its text: a search's
    candidates, `_CANDIDATE_COLUMNS`)."""
    metadata = row["metadata"]
    return MemoryRecord(
        id=row["id"],
        store=row["store"],
        content=row["content"],
        metadata=json.loads(metadata) if isinstance(metadata, str) else metadata,
        scope=Scope(row["user_id"], row["agent_id"], row["session_id"]),
        create_time=row["create_time"],
        seq=row["seq"],
        update_time=row["update_time"],
        expire_time=row["expire_time"],
        version=row["version"],
        etag_key=etag_key,
    )


def _scope_filter(columns: Iterable[str], table: str = "m") -> sql.Composable:
    """` AND m.user_id = %(user_id)s`, … for each column of a scope's fields (the entries' table is `m`; the
    sentences', `s`, keeps them too)."""
    return sql.SQL("").join(
        sql.SQL(" AND {} = {}").format(sql.Identifier(table, column), sql.Placeholder(column)) for column in columns
    )


def entries_where(scope: Scope, tree: Filter | None, live: bool = True) -> tuple[str, dict[str, Any]]:
    """The conditions after `m.namespace = %(namespace)s` for the entries of `scope` matching `tree` (and
    with `live`, not expired at `%(live_at)s`), and their parameters besides `live_at`."""
    scoped = scope.fields()
    condition, params = compile_filter(tree)
    return _scope_filter(scoped).as_string(None) + (LIVE if live else "") + condition, {**scoped, **params}


STORE_COLUMNS = "name, description, dimension, create_time, default_ttl"
_M_COLUMNS = sql.SQL(", ").join(sql.Identifier("m", column) for column in MEMORY_COLUMNS.split(", "))
# The columns of a candidate a ranking weighs: each column, but of the content only what the weighing reads
# (`weighing.READ_MOST`). The entries a search keeps are read whole after (`whole_statement`): a hundred entries asked
# of long ones weigh 500 candidates, 8 MB of content for Postgres to send and the event loop to parse, of which it
# reads a seventh.
# The metadata comes as its text, which `memory_from_row` parses: the driver's own reading of a jsonb value took six
# times as long (135 candidates, a LoCoMo question's: 0.9 ms against 0.15 ms and 0.2 ms to parse them).
_CANDIDATE_COLUMNS = sql.SQL(", ").join(
    sql.SQL("left(m.content, {most}) AS content").format(most=sql.Literal(READ_MOST))
    if column == "content"
    else sql.SQL("m.metadata::text AS metadata")
    if column == "metadata"
    else sql.Identifier("m", column)
    for column in MEMORY_COLUMNS.split(", ")
)


def _composed(
    text: str,
    dimension: int,
    where: str,
    exact: bool = True,
    columns: sql.Composable = _CANDIDATE_COLUMNS,
    **more: sql.Composable,
) -> str:
    """A search statement's `text` with what they all name filled in: the stores' and the entries' tables
    (`{stores}`, `{memories}`), the entries' `{columns}` (what the weighing reads, unless others are given), the
    `{dim}`ension, the entries' conditions (`{where}`, `entries_where`), and an entry's `{distance}` to
    `%(vector)b`, exact or the one the dimension's vector index serves; and `more`, a statement's own."""
    distance = _EXACT_DISTANCE if exact else _INDEXED_DISTANCE
    return (
        sql.SQL(text)
        .format(
            stores=sql.Identifier(SCHEMA, "stores"),
            memories=sql.Identifier(SCHEMA, "memories"),
            columns=columns,
            dim=sql.Literal(dimension),
            where=sql.SQL(where),
            distance=sql.SQL(distance).format(dim=sql.Literal(dimension)),
            **more,
        )
        .as_string(None)
    )


# The stores found, on one row only: on every row, each would carry (and the driver decode) its copy.
_KNOWN_ONCE = (
    "CASE WHEN row_number() OVER () = 1"
    " THEN (SELECT coalesce(jsonb_object_agg(name, dimension), '{{}}') FROM known) END AS known"
)
_KNOWN_STORES = (
    "WITH known AS MATERIALIZED ("
    " SELECT name, dimension FROM {stores}"
    " WHERE namespace = %(namespace)s AND (cardinality(%(names)s::text[]) = 0 OR name = ANY(%(names)s::text[]))"
    ")"
)


@functools.lru_cache(maxsize=128)
def search_statement(dimension: int, where: str, exact: bool = False) -> str:
    """The search statement for a dimension and the entries' conditions (`entries_where`); composed once,
    so every search of the same shape sends the same text (prepared by psycopg, planned per values).
    `exact` orders by the distance itself, which the vector index does not serve: every entry that
    matches is weighed. Its first row says how many candidates there were before `min_score`."""
    return _composed(
        (
            _KNOWN_STORES + ", candidates AS MATERIALIZED ("
            # Iterative index scans may return near-ties slightly out of order;
            # the outer sort restores exact order over the few candidates.
            " SELECT {columns}, {distance} AS distance FROM {memories} m"
            " WHERE m.namespace = %(namespace)s AND m.dimension = {dim}"
            " AND m.store = ANY(ARRAY(SELECT name FROM known WHERE dimension = {dim}))"
            " AND NOT (m.id = ANY(%(exclude)s)){where}"
            " ORDER BY distance LIMIT %(limit)s"
            ") SELECT " + _KNOWN_ONCE + ","
            " CASE WHEN row_number() OVER () = 1 THEN (SELECT count(*) FROM candidates) END AS candidate_count,"
            " found.* FROM (SELECT 1) AS one LEFT JOIN (SELECT * FROM candidates"
            " WHERE %(max_distance)s::float8 IS NULL OR distance <= %(max_distance)s) AS found ON true"
            " ORDER BY found.distance"
        ),
        dimension,
        where,
        exact,
        _M_COLUMNS,
    )


# The distance the dimension's vector index serves (over its own cast), and the same distance uncast, which it
# does not: a statement ordering by the second weighs every entry its conditions leave.
_INDEXED_DISTANCE = "((m.embedding::vector({dim})) <=> %(vector)b)::float8"
_EXACT_DISTANCE = "(m.embedding <=> %(vector)b)::float8"


# The query's words (the entries' `lexemes`: English stemming, names and numbers kept whole), each
# weighed by how many of the caller's entries hold it, as BM25 weighs a word (ln(1 + (n - holders + 0.5)
# / (holders + 0.5))), among up to 1,000 of them read (the scope's, `scope_sample`: migration 22, planned for the
# call's scope inside a statement planned once per connection, `GENERIC_PLAN`), with their mean length
# in words; and the words that find entries: those that tell entries apart, held by at most a tenth of
# those read and at most 200. When the 1,000 are a sample of more, a word held by at most 5 of them is
# counted by `word_matches` among all, and finds entries if at most 200 hold it. A word most entries
# hold finds none, though it adds to the score of an entry another word finds.
_WEIGHED_WORDS = (
    ", asked_words AS MATERIALIZED ("
    " SELECT DISTINCT t.lexeme AS word, plainto_tsquery('simple', t.lexeme) AS query"
    " FROM unnest(to_tsvector('english', %(words)s)) AS t"
    "), sample AS MATERIALIZED ("
    " SELECT s.lexemes FROM {sample}(%(namespace)s, ARRAY(SELECT name FROM known WHERE dimension = {dim}),"
    " (%(scope)s::text[])[1], (%(scope)s::text[])[2], (%(scope)s::text[])[3], 1000) AS s"
    "), sampled AS MATERIALIZED ("
    " SELECT count(*) AS size, coalesce(avg(length(s.lexemes)), 1)::float8 AS mean_length FROM sample s"
    "), weighed AS MATERIALIZED ("
    " SELECT w.word, ln(1 + greatest(0, z.size - k.held + 0.5) / (k.held + 0.5))::float8 AS idf,"
    " CASE WHEN z.size < 1000 THEN k.held BETWEEN 1 AND greatest(5, least(200, z.size / 10))"
    " ELSE k.held <= 5 END AS finding"
    " FROM asked_words w CROSS JOIN sampled z"
    " CROSS JOIN LATERAL (SELECT count(*) AS held FROM sample s WHERE s.lexemes @@ w.query) AS k"
    "), asked AS MATERIALIZED ("
    " SELECT array_agg(w.word) AS words, array_agg(w.idf) AS idf, (SELECT mean_length FROM sampled) AS mean_length,"
    " coalesce(array_agg(w.word) FILTER (WHERE w.finding), '{{}}') AS finding,"
    " CASE WHEN (SELECT size FROM sampled) < 1000 THEN NULL ELSE 200 END AS most"
    " FROM weighed w"
    ")"
)


@functools.lru_cache(maxsize=128)
def candidates_statement(
    dimension: int, where: str, each_store: bool, exact: bool = False, beside: bool = False, filtered: bool = False
) -> str:
    """The statement reading the candidates of rankings that judge each store's: each store's nearest,
    each with its distance. Unless `each_store` (a filter, or one store), they come from
    `nearest_per_store` (migration 11); with it, each store's `per_store` nearest that match the
    conditions are read by a statement of their own, through the vector index (its iterative scan skips
    what a filter refuses) or exactly, as its plan for the store decides; with `exact`, always exactly.
    With `beside`, the neighbours (`_BESIDE`) of the `%(seeds)s` nearest come in the same statement
    (`_read_beside`, `filtered` when the conditions hold a filter): each such candidate `seeded`, each neighbour
    on a row of its own with the id it is `beside`. Of each entry's content, what the weighing reads
    (`_CANDIDATE_COLUMNS`). Composed once per shape."""
    # Each store's nearest are sorted as stored (`{whole}`) and what the weighing reads of them made above the cut: a
    # scan's output is made for every entry it reads, and a scope's 419 entries cut to ten had their content's first
    # characters and their metadata's text made 419 times (0.5 to 1 ms of the statement's 2.4, LoCoMo).
    nearest = (
        " SELECT nearest.* FROM (SELECT name FROM known WHERE dimension = {dim}) AS s"
        " CROSS JOIN LATERAL (SELECT {columns}, m.distance FROM (SELECT {whole}, {distance} AS distance"
        " FROM {memories} m WHERE m.namespace = %(namespace)s AND m.dimension = {dim} AND m.store = s.name"
        " AND NOT (m.id = ANY(%(exclude)s)){where} ORDER BY distance LIMIT %(per_store)s) AS m) AS nearest"
        if each_store
        # The function is read where it is called, not through a CTE: a CTE copies what it returns.
        else " SELECT {columns}, m.distance FROM {nearest}(%(namespace)s, {dim}, %(vector)b,"
        " ARRAY(SELECT name FROM known WHERE dimension = {dim} ORDER BY name), %(per_store)s, %(pool)s,"
        " %(exclude)s, (%(scope)s::text[])[1], (%(scope)s::text[])[2], (%(scope)s::text[])[3], %(live_at)s) AS m"
    )
    if beside:
        # Here the nearest are read through a CTE (which copies them): the neighbours are read from them.
        seeds = _SEEDS.format(order=" ORDER BY f.distance LIMIT %(seeds)s")
        read = (
            f"{_KNOWN_STORES}, found AS MATERIALIZED ({nearest}),{seeds} SELECT {_KNOWN_ONCE},"
            f" f.*, {_SEEDED}, NULL::text AS beside"
            f" FROM (SELECT 1) AS one LEFT JOIN found f ON true UNION ALL SELECT NULL, {_NEIGHBOUR}, false, n.beside"
            + _read_beside(filtered)
        )
    else:
        read = f"{_KNOWN_STORES} SELECT {_KNOWN_ONCE}, found.* FROM (SELECT 1) AS one LEFT JOIN ({nearest}) AS found"
        read += " ON true"
    return _composed(
        read, dimension, where, exact, nearest=sql.Identifier(SCHEMA, "nearest_per_store"), whole=_M_COLUMNS
    )


@functools.lru_cache(maxsize=128)
def words_statement(dimension: int, lexical: str, where: str, beside: bool, filtered: bool) -> str:
    """The statement reading up to `%(lexical)s` entries that share the words of `%(words)s` among the
    stores of the dimension, as `lexical` (a function's name) weighs them: `word_matches` (every word,
    weighed as BM25 does among the entries of `%(scope)s`, read by `scope_sample`: `_WEIGHED_WORDS`) or
    `rare_word_matches` (the rare ones); each entry with its distance and its words' weight (`lexical`).
    Under `word_matches`, its first row also says (`named`, `unknown`, `sampled`) how many of
    `%(named)s` (a question's names; a name that is only a stopword does not count) none of the entries
    its words were weighed among holds, and how many those were: read from the same sample, and always
    on a row of its own when no entry matches (`unknown_share`). With `beside` (under `word_matches`),
    the neighbours of every entry found come too, as `candidates_statement` reads them (each entry whose
    neighbours were looked for `seeded`; `filtered` when `where` holds a filter). Of each entry's content, what
    the weighing reads. Each entry found is read by its key on its own (`_EACH_FOUND`). Composed once per shape.
    Under `word_matches` and no filter, its plan may be made once per connection (`GENERIC_PLAN`): what depends on
    the values (the scope's sample, the words' matches) is read by functions planned for each call's."""
    weighed = (
        " SELECT m.*, matched.weight AS lexical"
        " FROM asked CROSS JOIN {function}(asked.finding, asked.words, asked.idf, asked.mean_length, asked.most,"
    )
    if lexical == "word_matches" and beside:
        matched = _WEIGHED_WORDS + _NAMED + ", found AS MATERIALIZED (" + weighed
        ending = (
            ")," + _SEEDS.format(order="") + " SELECT " + _NAMED_ONCE + ", f.*, " + _SEEDED + ", NULL::text AS beside"
            " FROM (SELECT 1) AS one LEFT JOIN found f ON true"
            " UNION ALL SELECT NULL, NULL, NULL, "
            + _NEIGHBOUR
            + ", NULL::float8, false, n.beside"
            + _read_beside(filtered)
        )
    elif lexical == "word_matches":
        matched = _WEIGHED_WORDS + _NAMED + " SELECT " + _NAMED_ONCE + ", found.* FROM (SELECT 1) AS one LEFT JOIN ("
        matched += weighed
        ending = ") AS found ON true"
    else:
        matched = " SELECT m.*, matched.weight AS lexical FROM {function}(%(words)s,"
        ending = ""
    return _composed(
        _KNOWN_STORES + matched + " ARRAY(SELECT name FROM known WHERE dimension = {dim}), %(exclude)s,"
        " (%(scope)s::text[])[1], (%(scope)s::text[])[2], (%(scope)s::text[])[3], %(lexical)s) AS matched"
        + _EACH_FOUND
        + ending,
        dimension,
        where,
        function=sql.Identifier(SCHEMA, lexical),
        sample=sql.Identifier(SCHEMA, "scope_sample"),
    )


# The sentences of a scope's entries read by one search (`sentences_statement`), at most: an exact read of each
# one's distance, about a millisecond for 2,500 (a LoCoMo conversation's 600 turns), read by the scope's index
# (migration 24). A scope of more has none of its entries found by sentence (the read stops at one more than this,
# its bound: about 3 ms, and then its scope is not read for its sentences for `store.SENTENCELESS_SECONDS`), and
# those found otherwise are weighed without their sentences' lead.
SENTENCES_READ_MOST = 8000


@functools.lru_cache(maxsize=128)
def sentences_statement(dimension: int, where: str, scope: tuple[str, ...], filtered: bool) -> str:
    """The statement reading the `%(by_sentence)s` entries whose best sentence (migration 24's rows) is nearest to
    `%(vector)b` among the stores of the dimension and the scope's fields `scope` (none when the scope holds more
    than `%(sentences_most)s` sentences: `SENTENCES_READ_MOST`), each read by its key within the entries'
    conditions `where`, with its own distance and its best sentence's (`sentence_distance`), and its neighbours, as
    `candidates_statement` reads them with `beside` (`filtered` when `where` holds a filter). Of each entry's
    content, what the weighing reads. Its first row says how many sentences the scope holds (`held`, up to one more
    than `%(sentences_most)s`: counted in the one read of their distances, where a count of its own read them again),
    on a row of its own when none is found. Entries whose best sentences are as near (a sentence said in several
    turns, "Thanks!") are taken in the order of their ids, whatever order the plan reads them in. Composed once per
    shape."""
    in_scope = (
        " FROM {sentences} s WHERE s.namespace = %(namespace)s"
        " AND s.store = ANY(ARRAY(SELECT name FROM known WHERE dimension = {dim})){scope}"
    )
    read = (
        _KNOWN_STORES + ", scanned AS MATERIALIZED (SELECT s.memory_id,"
        " (s.embedding <=> %(vector)b::halfvec)::float8 AS sentence_distance" + in_scope
        + " LIMIT %(sentences_most)s + 1), held AS MATERIALIZED (SELECT count(*) AS held FROM scanned),"
        " best AS MATERIALIZED (SELECT c.memory_id, min(c.sentence_distance) AS sentence_distance FROM scanned c"
        " WHERE NOT (c.memory_id = ANY(%(exclude)s)) AND (SELECT h.held FROM held h) <= %(sentences_most)s"
        " GROUP BY c.memory_id ORDER BY 2, 1 LIMIT %(by_sentence)s"
        "), found AS MATERIALIZED (SELECT m.*, b.sentence_distance FROM best b CROSS JOIN LATERAL ("
        " SELECT {columns}, {distance} AS distance FROM {memories} m"
        " WHERE m.namespace = %(namespace)s AND m.id = b.memory_id{where} OFFSET 0) AS m),"
        + _SEEDS.format(order="")
        + " SELECT CASE WHEN row_number() OVER () = 1 THEN (SELECT h.held FROM held h) END AS held, f.*, " + _SEEDED
        + ", NULL::text AS beside FROM (SELECT 1) AS one LEFT JOIN found f ON true"
        " UNION ALL SELECT NULL, " + _NEIGHBOUR + ", NULL::float8, false, n.beside" + _read_beside(filtered)
    )  # fmt: skip
    return _composed(
        read, dimension, where, sentences=sql.Identifier(SCHEMA, "sentences"), scope=_scope_filter(scope, "s")
    )


# Each entry a words' function found (`matched`), read by its key on its own, within the conditions (`m`): kept apart
# from the statement around it (`OFFSET 0`), the planner cannot join the matches to every entry of the scope instead,
# which it did for a store it held no statistics of yet (its first minute, before autovacuum's turn): 419 entries read
# and weighed for 20 matches, the words' statement 5.4 ms against 4.4.
_EACH_FOUND = (
    " CROSS JOIN LATERAL (SELECT {columns}, {distance} AS distance FROM {memories} m"
    " WHERE m.namespace = %(namespace)s AND m.id = matched.id{where} OFFSET 0) AS m"
)


# How many of the caller's entries a question's names are looked for among (`_WEIGHED_WORDS`' sample): a
# scope larger than this cannot say a name is unknown to it (`unknown_share`), only that its sample does
# not hold it.
NAMES_SAMPLE = 1000
_NAMED = (
    ", named AS MATERIALIZED ("
    " SELECT count(*) AS named, count(*) FILTER (WHERE NOT EXISTS"
    " (SELECT 1 FROM sample s WHERE s.lexemes @@ n.query)) AS unknown"
    " FROM (SELECT plainto_tsquery('english', name) AS query FROM unnest(%(named)s::text[]) AS name) AS n"
    " WHERE numnode(n.query) > 0"
    ")"
)
_NAMED_ONCE = ", ".join(
    f"CASE WHEN row_number() OVER () = 1 THEN (SELECT {value} FROM {table}) END AS {column}"
    for column, value, table in (
        ("named", "named", "named"),
        ("unknown", "unknown", "named"),
        ("sampled", "size", "sampled"),
    )
)


def unknown_share(rows: list[dict[str, Any]]) -> float:
    """The share of a question's names its scope holds none of (`words_statement`'s first row); 0 when
    it names none, or when the scope is larger than the sample read."""
    named, sampled = once(rows, "named"), once(rows, "sampled")
    if not named or sampled >= NAMES_SAMPLE:
        return 0.0
    return float(once(rows, "unknown")) / float(named)


# The entries written just before and just after an entry `c` (its store and `seq`) in its session, or, for an
# entry in none, among the entries of its store in none written by its user and agent (in the order they were
# written: turns stored without a session's id still have the turns beside them), within the entries' conditions
# (`{where}`), each with its distance to `%(vector)b`; an entry in no session and of no author has none. Each is
# one step of the neighbours' index (migration 18), whose key and predicate it repeats (an entry in a session is
# keyed by it alone, one in none by its author too; one of neither is not in it): the planner does not carry them
# over from `c`.
_SIDE = (
    " (SELECT {columns}, (m.embedding <=> %(vector)b)::float8 AS distance FROM {memories} m"
    " WHERE m.namespace = %(namespace)s AND m.store = c.store AND m.session_id = c.session_id"
    " AND (CASE WHEN m.session_id = '' THEN m.user_id ELSE '' END)"
    " = (CASE WHEN c.session_id = '' THEN c.user_id ELSE '' END)"
    " AND (CASE WHEN m.session_id = '' THEN m.agent_id ELSE '' END)"
    " = (CASE WHEN c.session_id = '' THEN c.agent_id ELSE '' END)"
    " AND (c.session_id <> '' OR c.user_id <> '' OR c.agent_id <> '')"
    " AND (m.session_id <> '' OR m.user_id <> '' OR m.agent_id <> '')"
    " AND m.seq {comparison} c.seq AND NOT (m.id = ANY(%(exclude)s)){where} ORDER BY m.seq {order} LIMIT 1)"
)
_BESIDE = (
    _SIDE.replace("{comparison}", "<").replace("{order}", "DESC")
    + " UNION ALL"
    + _SIDE.replace("{comparison}", ">").replace("{order}", "")
)
# A statement's candidates whose neighbours it reads too (`found` is what it found; those that can have any, in a
# session or of an author).
_SEEDS = (
    " seeds AS MATERIALIZED (SELECT f.id, f.store, f.session_id, f.user_id, f.agent_id, f.seq FROM found f"
    " WHERE f.session_id <> '' OR f.user_id <> '' OR f.agent_id <> ''{order})"
)
# A seed's neighbour as a candidate (`n`): the columns of `_CANDIDATE_COLUMNS` (its metadata as text), its distance,
# and the seed it is `beside`.
_NEIGHBOUR = ", ".join(
    f"n.{column}::text" if column == "metadata" else f"n.{column}"
    for column in [*MEMORY_COLUMNS.split(", "), "distance"]
)


# The neighbours of a statement's `seeds` by `neighbours_of`, each with its place (`contextfold.seed`), as `n`.
_NEIGHBOURS_OF = (
    sql.SQL(
        " FROM {function}(%(namespace)s,"
        " ARRAY(SELECT ROW(s.id, s.store, s.session_id, s.user_id, s.agent_id, s.seq)::{seed} FROM seeds s),"
        " %(vector)b, %(exclude)s,"
        " (%(scope)s::text[])[1], (%(scope)s::text[])[2], (%(scope)s::text[])[3], %(live_at)s, {most}) AS n"
    )
    .format(
        function=sql.Identifier(SCHEMA, "neighbours_of"),
        seed=sql.Identifier(SCHEMA, "seed"),
        most=sql.Literal(READ_MOST),
    )
    .as_string(None)
)


def _read_beside(filtered: bool) -> str:
    """How a statement reads the neighbours of its `seeds` (`_SEEDS`), each as `n` (`_NEIGHBOUR`): by
    `neighbours_of` (migration 20), whose plan is made once per connection, where planning them in the statement
    took 0.3 ms of each question; or, `filtered`, in the statement, under the filter it holds (each side's
    nearest entry that matches it), which the function does not apply."""
    if filtered:
        return " FROM seeds c CROSS JOIN LATERAL (SELECT b.*, c.id AS beside FROM (" + _BESIDE + ") AS b) AS n"
    return _NEIGHBOURS_OF


# Whether a found entry's neighbours were looked for (it is among the seeds).
_SEEDED = "f.id IN (SELECT s.id FROM seeds s) AS seeded"


@functools.lru_cache(maxsize=32)
def whole_statement(where: str) -> str:
    """The entries `%(ids)s` whole, within the entries' conditions (`entries_where`): those a ranking kept, whose
    content it read up to `READ_MOST` characters (`_CANDIDATE_COLUMNS`)."""
    return (
        f"SELECT {MEMORY_COLUMNS} FROM {SCHEMA}.memories m"
        f" WHERE m.namespace = %(namespace)s AND m.id = ANY(%(ids)s){where}"
    )


@functools.lru_cache(maxsize=32)
def neighbours_statement(where: str) -> str:
    """The entries written just before and just after each of `%(ids)s` in its store and session, or its
    author's order (by `seq`; `_BESIDE`), within the entries' conditions (`entries_where`), with their
    distance to `%(vector)b` and the id they are beside (`beside`), and of their content what the weighing
    reads. Entries in no session and of no author have none."""
    return (
        sql.SQL(
            "SELECT n.*, c.id AS beside FROM {memories} c CROSS JOIN LATERAL (" + _BESIDE + ") AS n"
            " WHERE c.namespace = %(namespace)s AND c.id = ANY(%(ids)s)"
        )
        .format(columns=_CANDIDATE_COLUMNS, memories=sql.Identifier(SCHEMA, "memories"), where=sql.SQL(where))
        .as_string(None)
    )


# A statement whose plan holds for any values (an entry's neighbours: one step of an index from each id's
# row) is planned once per connection rather than on every call, as `SEARCH_SETTINGS` has it.
GENERIC_PLAN = {"plan_cache_mode": "force_generic_plan"}
# The sentences' statement (`sentences_statement`) sorts its few best: it runs after the nearest, whose filtered read
# turns sorting off for the rest of its transaction. (Planned once per connection, it took twice as long.)
SENTENCES_PLAN = {"enable_sort": "on"}


# A filtered search reads through the vector index first: the planner cannot tell how many entries a
# filter keeps (it has no statistics inside metadata) and would often read a store whole to sort it. The
# index's scan gives up after this many entries (a filter few entries pass), and the search is then
# done exactly (`exact`): bounded work wasted, never a result missed.
INDEX_FIRST = {"enable_sort": "off", "hnsw.max_scan_tuples": "5000"}


def known_stores(rows: list[dict[str, Any]]) -> dict[str, int]:
    """The dimension of each store a search statement found (`_KNOWN_ONCE`: on one of its rows)."""
    return dict(once(rows, "known"))


def anchored(tree: Filter | None, params: dict[str, Any]) -> str:
    """` AND m.id IN (the holders of the filter's anchor)` (`filters.anchor`), its documents added to
    `params`; empty when the filter has no anchor."""
    documents = anchor(tree)
    if documents is None:
        return ""
    params["anchor"] = documents
    return f" AND m.id IN (SELECT {SCHEMA}.metadata_holders(%(anchor)s::jsonb[]))"


def once(rows: list[dict[str, Any]], column: str) -> Any:
    """A value a statement returns on one of its rows only (the first it numbered, not always the first
    it sorted)."""
    return next(row[column] for row in rows if row[column] is not None)


# An entry's columns as a write gives them; the rest (seq, version, lexemes) Postgres fills in.
_ENTRY_COLUMNS = (
    "id, store, content, metadata, user_id, agent_id, session_id, embedding, create_time, update_time, expire_time,"
    " sentences_state"
)
_ENTRY_ARRAYS = (
    "%(ids)s::text[], %(stores)s::text[], %(contents)s::text[], %(metadata)s::jsonb[], %(user_ids)s::text[],"
    " %(agent_ids)s::text[], %(session_ids)s::text[], %(embeddings)b::vector[], %(create_times)s::timestamptz[],"
    " %(update_times)s::timestamptz[], %(expire_times)s::timestamptz[], %(sentences_states)s::smallint[]"
)
# Whose vector an entry holds, as `memories.sentences_state` says it (migration 24): the caller's (NULL), the
# server's model's (its sentences to be embedded), or not known (checked before its sentences are embedded).
SENTENCES_PENDING = 0
SENTENCES_UNCHECKED = 1
SENTENCES_DONE = 2


def insert_entries(on_conflict: str, returning: str, keep_times: bool = False) -> str:
    """The one statement that adds entries (`entry_params` gives its parameters): each is created now
    unless it brings its creation time, updated never unless it brings a later update time, and expires
    when it says or after the store's time-to-live (`%(ttl)s`); then `on_conflict` (an id taken) and
    `returning`. With `keep_times`, an entry that brings no times keeps those of the entry its id holds
    (an import of an export without times changes nothing the second time)."""
    existing = f"(SELECT e.{{}} FROM {SCHEMA}.memories e WHERE e.namespace = %(namespace)s AND e.id = g.id)"
    created = (
        f"coalesce(g.create_time, {existing.format('create_time')}, now())"
        if keep_times
        else "coalesce(g.create_time, now())"
    )
    updated = (
        f"CASE WHEN g.create_time IS NULL AND g.update_time IS NULL THEN {existing.format('update_time')}"
        " ELSE nullif(g.update_time, g.create_time) END"
        if keep_times
        else "nullif(g.update_time, g.create_time)"
    )
    return (
        f"WITH given AS (SELECT * FROM unnest({_ENTRY_ARRAYS}) AS g({_ENTRY_COLUMNS}))"
        f" INSERT INTO {SCHEMA}.memories AS m (namespace, {_ENTRY_COLUMNS}, dimension)"
        " SELECT %(namespace)s, g.id, g.store, g.content, g.metadata, g.user_id, g.agent_id, g.session_id,"
        f" g.embedding, {created}, {updated},"
        " coalesce(g.expire_time, now() + %(ttl)s::interval), g.sentences_state, vector_dims(g.embedding)"
        f" FROM given g ON CONFLICT (namespace, id) {on_conflict} RETURNING {returning}"
    )


def stored_as_given() -> str:
    """Each entry stored under the ids of `entry_params`, and whether it holds what was given there (the
    same store, content, metadata and scope), compared by Postgres as it keeps them: metadata compares
    as JSON numbers do, whatever a float read back looks like. It reads only the parameters it
    compares (`entry_params`' vectors are not sent again)."""
    given = (
        "%(ids)s::text[], %(stores)s::text[], %(contents)s::text[], %(metadata)s::jsonb[], %(user_ids)s::text[],"
        " %(agent_ids)s::text[], %(session_ids)s::text[]"
    )
    return (
        f"WITH given AS (SELECT * FROM unnest({given}) AS g(id, store, content, metadata, user_id, agent_id,"
        f" session_id)) SELECT {_M_COLUMNS.as_string(None)}, (m.store, m.content, m.metadata, m.user_id,"
        " m.agent_id, m.session_id) = (g.store, g.content, g.metadata, g.user_id, g.agent_id, g.session_id) AS same"
        f" FROM given g JOIN {SCHEMA}.memories m ON m.namespace = %(namespace)s AND m.id = g.id"
    )


def compared(params: dict[str, Any]) -> dict[str, Any]:
    """Of `entry_params`' parameters, those `stored_as_given` reads."""
    return {name: params[name] for name in _COMPARED}


_COMPARED = ("namespace", "ids", "stores", "contents", "metadata", "user_ids", "agent_ids", "session_ids")


def entry_params(
    namespace: str,
    entries: Sequence[tuple[str, str, NewMemory]],
    ttl: timedelta | None = None,
    times: Sequence[tuple[Any, Any]] = (),
    imported: bool = False,
) -> dict[str, Any]:
    """`insert_entries`' parameters for (id, store, entry) triples, with each one's (create, update)
    times where given. Whose vector each holds (`sentences_state`): the server's model's when it says it was
    `embedded`, else the caller's, unless `imported`: an imported vector may be an export of the server's own, and
    is checked."""
    times = times or [(None, None)] * len(entries)
    states = [
        SENTENCES_PENDING if memory.embedded else SENTENCES_UNCHECKED if imported else None for _, _, memory in entries
    ]
    return {
        "namespace": namespace,
        "ids": [entry_id for entry_id, _, _ in entries],
        "stores": [store for _, store, _ in entries],
        "contents": [memory.content for _, _, memory in entries],
        "metadata": [Jsonb(memory.metadata) for _, _, memory in entries],
        "user_ids": [memory.scope.user_id for _, _, memory in entries],
        "agent_ids": [memory.scope.agent_id for _, _, memory in entries],
        "session_ids": [memory.scope.session_id for _, _, memory in entries],
        "embeddings": [np.asarray(memory.vector, dtype=np.float32) for _, _, memory in entries],
        "create_times": [created for created, _ in times],
        "update_times": [updated for _, updated in times],
        "expire_times": [memory.expire_time for _, _, memory in entries],
        "sentences_states": states,
        "ttl": ttl,
    }
