"""A vector for each sentence of an entry that says several things: embedded after the write by the bulk workers,
kept with its entry, searched by the default ranking beside the entries' own vectors."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import psycopg
import pytest
from contextfold import Client
from contextfold.v1 import memory_pb2
from contextfold_server.engine.weighing import MOST_SENTENCES, entry_sentences
from contextfold_server.memory.sentences import FILL_TEXTS, within_texts
from contextfold_server.memory.store import SENTENCELESS_SECONDS
from contextfold_server.postgres.migrations import migrate
from contextfold_server.postgres.schema import OPEN_NAMESPACE
from pgvector.psycopg import register_vector

from harness.messages import unique, user
from harness.polling import wait_for
from harness.servers import Postgres, ServerProcess, sample, start_server


@pytest.fixture(scope="module")
def served(postgres: Postgres, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    server = start_server(tmp_path_factory.mktemp("sentences") / "server.log", "--database-url", postgres.url)
    yield server
    assert server.stop() == 0, server.log()


@pytest.fixture(scope="module")
def cf(served: ServerProcess) -> Iterator[Client]:
    with Client(served.address, timeout=30) as client:
        yield client


def sentence_rows(postgres: Postgres, memory_id: str) -> list[tuple]:
    """The entry's sentences' rows: (position, store, user_id, session_id), in order."""
    return postgres.query(
        "SELECT position, store, user_id, session_id FROM contextfold.sentences WHERE memory_id = %s ORDER BY 1",
        (memory_id,),
    )


def state(postgres: Postgres, memory_id: str) -> int | None:
    return postgres.query("SELECT sentences_state FROM contextfold.memories WHERE id = %s", (memory_id,))[0][0]


# Which sentences an entry has


def test_a_turn_of_several_sentences_has_each_written_as_its_speaker_said_it() -> None:
    turn = "Caroline: Thanks, Mel! It was tough. Been reading that book you recommended. Do you like it?"

    assert entry_sentences(turn) == [
        "Caroline: Thanks, Mel!",
        "Caroline: It was tough.",
        "Caroline: Been reading that book you recommended.",
        "Caroline: Do you like it?",
    ]


def test_an_entry_of_one_sentence_has_none_of_its_own_and_a_long_one_has_at_most_the_first_few() -> None:
    assert entry_sentences("Bob is allergic to peanuts.") == []
    assert entry_sentences("Caroline: I love pottery!") == []
    many = " ".join(f"Fact {n} is here." for n in range(40))
    assert entry_sentences(many) == [f"Fact {n} is here." for n in range(MOST_SENTENCES)]


def test_a_round_gives_the_model_a_bounded_share_of_a_tenants_texts() -> None:
    turn = {"id": "turn", "content": "Ana: One. Two. Three. Four.", "sentences_state": 0}
    unknown = {"id": "unknown", "content": "Ana: One. Two. Three. Four.", "sentences_state": 1}
    long = {"id": "long", "content": " ".join(f"Fact {n}." for n in range(40)), "sentences_state": 0}
    said = {row["id"]: entry_sentences(row["content"]) for row in (turn, unknown, long)}

    assert len(within_texts([turn] * 64, said)) == FILL_TEXTS // 4
    assert len(within_texts([unknown] * 64, said)) == FILL_TEXTS // 5, "one embedded again counts its whole text"
    assert within_texts([long], said, most=3) == [long], "the first goes, whatever it holds"


# Written after the entry, kept with it


def test_sentences_are_embedded_after_the_write_and_follow_their_entry(cf: Client, postgres: Postgres) -> None:
    store = unique("follow")
    cf.create_store(store)
    (added,) = cf.add_memories(
        store, [{"content": "Ana: I moved to Lisbon. The flat is small. It has a balcony.", "user_id": "ana"}]
    )
    postgres.sentences_settled(timeout=60)
    assert sentence_rows(postgres, added.id) == [(n, store, "ana", "") for n in range(3)]
    assert state(postgres, added.id) == 2

    # New text: the old sentences go with it, the new ones come after.
    cf.update_memory(added.id, content="Ana: I moved to Porto. The flat is big.")
    assert len(sentence_rows(postgres, added.id)) == 0
    postgres.sentences_settled(timeout=60)
    assert sentence_rows(postgres, added.id) == [(n, store, "ana", "") for n in range(2)]

    # Another scope: the rows go along, as a scope's search reads them by its own.
    cf.update_memory(added.id, user_id="ana-2", session_id="s1")
    assert sentence_rows(postgres, added.id) == [(n, store, "ana-2", "s1") for n in range(2)]

    cf.delete_memories([added.id])
    assert sentence_rows(postgres, added.id) == []


def test_a_callers_vector_gets_no_sentences(cf: Client, postgres: Postgres, served: ServerProcess) -> None:
    store = unique("given")
    cf.create_store(store)
    vector = np.random.default_rng(3).normal(size=384)
    (given,) = cf.add_memories(
        store,
        [{"content": "One sentence. And another one. And a third.", "vector": list(vector / np.linalg.norm(vector))}],
    )
    (embedded,) = cf.add_memories(store, ["One sentence. And another one. And a third, embedded."])
    postgres.sentences_settled(timeout=60)

    assert state(postgres, given.id) is None and sentence_rows(postgres, given.id) == []
    assert len(sentence_rows(postgres, embedded.id)) == 3
    assert sample(served.scrape(), "contextfold_sentences_settled_total", outcome="embedded") >= 1


def test_an_imported_entry_gets_sentences_only_when_its_vector_is_the_models(cf: Client, postgres: Postgres) -> None:
    store = unique("imported")
    cf.create_store(store)
    (ours,) = cf.add_memories(store, ["Kemi plays chess. She won a cup. It was in Oslo."])
    exported = [part for part in cf.export_memories(stores=[store])]
    cf.delete_memories([ours.id])
    foreign = np.random.default_rng(4).normal(size=384)
    other = memory_pb2.Memory(
        id=unique("foreign"), store=store, content="Lars sails. He has a boat. It is blue.", vector=list(foreign)
    )

    cf.import_memories([*exported, memory_pb2.ImportMemoriesRequest(memories=[other])])
    assert state(postgres, ours.id) == 1 and state(postgres, other.id) == 1, "whose vector each holds is not known"
    postgres.sentences_settled(timeout=60)

    assert len(sentence_rows(postgres, ours.id)) == 3, "the export's vector is the model's: checked, then embedded"
    assert state(postgres, other.id) is None and sentence_rows(postgres, other.id) == []


def test_entries_written_before_sentences_are_checked_then_embedded(tmp_path: Path, fresh_postgres: Postgres) -> None:
    asyncio.run(migrate(fresh_postgres.url, up_to=23))
    with psycopg.connect(fresh_postgres.url, autocommit=True) as conn:
        register_vector(conn)
        conn.execute(
            "INSERT INTO contextfold.stores (namespace, name, dimension) VALUES (%s, 'old', 384)", (OPEN_NAMESPACE,)
        )
        noise = np.random.default_rng(5).normal(size=384).astype(np.float32)
        conn.execute(
            "INSERT INTO contextfold.memories (namespace, id, store, content, dimension, embedding)"
            " VALUES (%s, 'old-1', 'old', 'Old news. It is old.', 384, %s)",
            (OPEN_NAMESPACE, noise / np.linalg.norm(noise)),
        )
    server = start_server(tmp_path / "server.log", "--database-url", fresh_postgres.url)
    try:
        fresh_postgres.sentences_settled(timeout=60)
        assert state(fresh_postgres, "old-1") is None, "checked: its vector is not the model's"
        with Client(server.address, timeout=30) as client:
            (added,) = client.add_memories("old", ["New news. It is new."])
        fresh_postgres.sentences_settled(timeout=60)
        assert len(sentence_rows(fresh_postgres, added.id)) == 2
    finally:
        assert server.stop() == 0, server.log()


# Found by a sentence


PUPPY = (
    "Caroline: Thanks, Melanie. It was a tough week at work, but I'm doing ok. Been reading that novel you"
    " recommended. My sister adopted a puppy named Biscuit last week. Anyway, the beach sounds lovely."
)


def test_a_turn_is_found_by_the_one_of_its_sentences_the_question_asks_about(cf: Client, postgres: Postgres) -> None:
    store = unique("talk")
    cf.create_store(store)
    # Each nearer the question as a whole than the turn is (0.55 to 0.63 against 0.43); none says what she adopted.
    others = [
        f"Caroline: My sister {did}."
        for did in (
            "works at a bank downtown", "loves hiking in the hills", "is thinking about moving to the coast",
            "bought a new car last month", "volunteers at the library", "cooked dinner for the whole family",
        )
    ]  # fmt: skip
    others += ["Caroline: My sister and I went to a concert.", "Caroline: My sister's kids are starting school soon."]
    added = cf.add_memories(store, [{"content": text, "user_id": "talk"} for text in [PUPPY, *others]])
    (elsewhere,) = cf.add_memories(store, [{"content": PUPPY, "user_id": "another-talk"}])
    postgres.sentences_settled(timeout=60)
    question = [user("What kind of pet did Caroline's sister adopt?")]

    alike = cf.inject(question, stores=[store], scope={"user_id": "talk"}, ranking="similarity")
    result = cf.inject(question, stores=[store], scope={"user_id": "talk"}, explain=True)

    assert added[0].id not in [entry.id for entry in alike.report.entries], "by its own vector, it is not in the five"
    first, second = result.report.candidates[:2]
    assert result.report.entries[0].id == first.id == added[0].id
    assert dict(first.inputs)["sentence"] > 0.15, "its best sentence is much nearer the question than the turn is"
    assert dict(first.signals)["sentence"] > first.score - second.score, "the sentence is what puts it first"
    assert elsewhere.id not in [c.id for c in result.report.candidates], "another scope's sentences are not searched"


def test_a_scope_searched_before_its_sentences_were_written_finds_them_soon_after(
    cf: Client, postgres: Postgres
) -> None:
    store = unique("soon")
    cf.create_store(store)
    question = [user("What kind of pet did Caroline's sister adopt?")]
    scope = {"user_id": "soon"}
    cf.add_memories(store, [{"content": "Caroline: My sister works at a bank downtown.", "user_id": "soon"}])
    postgres.sentences_settled(timeout=60)
    before = cf.inject(question, stores=[store], scope=scope, explain=True)  # a scope with no sentences yet
    (puppy,) = cf.add_memories(store, [{"content": PUPPY, "user_id": "soon"}])
    postgres.sentences_settled(timeout=60)

    def lead() -> float:
        found = cf.inject(question, stores=[store], scope=scope, explain=True).report.candidates
        return next((dict(c.inputs)["sentence"] for c in found if c.id == puppy.id), 0.0)

    assert all(dict(c.inputs)["sentence"] == 0.0 for c in before.report.candidates)
    # Within the time a scope found without sentences is searched without them, and a loose margin.
    assert wait_for(lambda: lead() > 0.15, SENTENCELESS_SECONDS + 5, what="the scope's sentences to be searched")
