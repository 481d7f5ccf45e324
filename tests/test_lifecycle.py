"""The memory lifecycle: updates with etags and versions, metadata filters, expiry, export and import.

Erasure across tenants is in test_tenancy.py; Remember in test_remember.py.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from contextfold import Aborted, Client, InvalidArgument, NotFound
from contextfold.v1 import memory_pb2
from google.protobuf import json_format

from harness.messages import unique, user
from harness.polling import wait_for
from harness.servers import Postgres, ServerProcess, serving, start_server

from .filter_oracle import holds, random_filter, random_metadata

# Updates


def test_an_update_changes_the_fields_named_and_keeps_the_version_it_replaced(client: Client, make_store) -> None:
    store = make_store()
    (added,) = client.add_memories(
        store, [{"id": unique("home"), "content": "The user lives in Denver", "metadata": {"kind": "home"}}]
    )
    updated = client.update_memory(added.id, content="The user moved to Lisbon", etag=added.etag).memory

    assert (updated.content, dict(updated.metadata)) == ("The user moved to Lisbon", {"kind": "home"})
    assert updated.etag != added.etag
    assert updated.update_time.ToDatetime() > added.create_time.ToDatetime()
    assert updated.create_time == added.create_time
    # The new text was embedded again: a search for the new city finds it first.
    (best,) = client.search_memories("Where does the user live? Lisbon", stores=[store], max_results=1)
    assert best.memory.content == "The user moved to Lisbon"
    (version,) = client.list_memory_versions(added.id)
    assert (version.version, version.memory.content, dict(version.memory.metadata)) == (
        1,
        "The user lives in Denver",
        {"kind": "home"},
    )
    assert version.replace_time.ToDatetime() >= added.create_time.ToDatetime()

    # Undoing a wrong correction: the old version's content, written back.
    restored = client.update_memory(added.id, content=version.memory.content, etag=updated.etag).memory
    assert restored.content == "The user lives in Denver"
    assert [v.memory.content for v in client.list_memory_versions(added.id)] == [
        "The user moved to Lisbon",
        "The user lives in Denver",
    ]


def test_only_one_of_two_updates_of_the_same_version_lands(client: Client, make_store) -> None:
    store = make_store()
    (added,) = client.add_memories(store, [{"id": unique("race"), "content": "Meeting at 10"}])
    outcomes: list[str] = []
    start = threading.Barrier(8)

    def correct(n: int) -> None:
        start.wait()
        try:
            client.update_memory(added.id, content=f"Meeting at {11 + n}", etag=added.etag)
            outcomes.append("ok")
        except Aborted as error:
            assert error.reason == "ETAG_MISMATCH"
            outcomes.append("aborted")

    threads = [threading.Thread(target=correct, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["aborted"] * 7 + ["ok"]
    assert len(list(client.list_memory_versions(added.id))) == 1, "no update overwrote another silently"
    # Without an etag, the last writer wins, and each update keeps what it replaced.
    client.update_memory(added.id, metadata={"checked": True})
    assert len(list(client.list_memory_versions(added.id))) == 2


def test_a_delete_with_an_etag_deletes_only_the_version_read(client: Client, make_store) -> None:
    store = make_store()
    (read,) = client.add_memories(store, [{"id": unique("plan"), "content": "Launch on Monday"}])
    changed = client.update_memory(read.id, content="Launch on Tuesday").memory

    with pytest.raises(Aborted) as stale:
        client.delete_memories([read.id], etag=read.etag)
    assert stale.value.reason == "ETAG_MISMATCH"
    assert client.get_memory(read.id).content == "Launch on Tuesday", "the newer version is kept"
    with pytest.raises(InvalidArgument) as two:
        client.delete_memories([read.id, unique("other")], etag=changed.etag)
    assert [field for field, _ in two.value.field_violations] == ["etag"]

    assert client.delete_memories([read.id], etag=changed.etag) == 1
    with pytest.raises(NotFound):
        client.get_memory(read.id)
    assert client.delete_memories([read.id], etag=changed.etag, allow_missing=True) == 0


def test_an_upsert_adds_under_a_free_id_and_updates_after(client: Client, make_store) -> None:
    store = make_store()
    memory_id = unique("upsert")
    first = client.update_memory(memory_id, content="Prefers window seats", store=store, allow_missing=True)
    assert first.created and first.memory.store == store
    second = client.update_memory(memory_id, content="Prefers aisle seats", store=store, allow_missing=True)
    assert not second.created
    assert client.get_memory(memory_id).content == "Prefers aisle seats"
    with pytest.raises(Aborted):
        client.update_memory(unique("free"), content="x", store=store, allow_missing=True, etag="1.1")


def test_bad_updates_are_refused_by_field_and_change_nothing(client: Client, make_store) -> None:
    store, other = make_store(), make_store()
    (added,) = client.add_memories(store, [{"id": unique("keep"), "content": "unchanged"}])
    refusals = {
        "update_mask.paths[0]": lambda: client._run(  # a path no entry has
            _raw_update(memory_pb2.Memory(id=added.id, content="x"), ["store"])
        ),
        "memory.store": lambda: client.update_memory(added.id, content="moved", store=other),
        "memory.content": lambda: client.update_memory(added.id, content=""),
        "memory.vector": lambda: client.update_memory(added.id, vector=[0.5, 0.5]),
        "memory.metadata.x": lambda: client.update_memory(added.id, metadata={"x": float("nan")}),
        "update_mask": lambda: client._run(_raw_update(memory_pb2.Memory(id=added.id), [])),
    }
    for field, call in refusals.items():
        with pytest.raises(InvalidArgument) as refused:
            call()
        assert refused.value.field_violations[0][0] == field, refused.value
    with pytest.raises(NotFound):
        client.update_memory(unique("missing"), content="nothing here")
    assert client.get_memory(added.id).content == "unchanged"
    assert list(client.list_memory_versions(added.id)) == []


def _raw_update(memory: memory_pb2.Memory, paths: list[str]):
    from contextfold.client import _Call

    request = memory_pb2.UpdateMemoryRequest(memory=memory, update_mask={"paths": paths})
    return _Call("memory", "UpdateMemory", request, lambda r: r)


# Filters


@pytest.fixture(scope="module")
def filtered(client: Client) -> Iterator[tuple[list[str], list[dict]]]:
    """Two stores of 8-dimensional entries with random metadata, added in four batches (four creation
    times): the stores, and each entry as the oracle sees it."""
    rng = random.Random(17)
    stores = [unique("filtered-a"), unique("filtered-b")]
    for store in stores:
        client.create_store(store, dimension=8)
    entries: list[dict] = []
    for batch in range(4):
        for store in stores:
            memories = [
                {
                    "id": f"{store}-{batch}-{n}",
                    "content": f"entry {batch}-{n}",
                    "metadata": random_metadata(rng),
                    "vector": [rng.gauss(0, 1) for _ in range(8)],
                }
                for n in range(60)
            ]
            added = client.add_memories(store, memories)
            for memory, stored in zip(memories, added, strict=True):
                entries.append({**memory, "store": store, "create_time": stored.create_time.ToDatetime(tzinfo=UTC)})
        # The next batch is created later than this one: a range on the creation time tells them apart.
        last = max(entry["create_time"] for entry in entries)
        wait_for(lambda last=last: datetime.now(UTC) > last, 5, what="the clock to pass the batch's creation time")
    yield stores, entries
    for store in stores:
        client.delete_store(store, force=True)


def test_filters_select_what_a_brute_force_evaluation_selects(client: Client, filtered) -> None:
    stores, entries = filtered
    rng = random.Random(5)
    times = sorted({entry["create_time"] for entry in entries})
    matched_some = 0
    for _ in range(80):
        tree = random_filter(rng, times)
        expected = {e["id"] for e in entries if e["store"] == stores[0] and holds(tree, e)}
        listed = {m.id for m in client.list_memories(stores[0], filter=tree, page_size=100)}
        assert listed == expected, json_format.MessageToJson(tree)
        matched_some += 0 < len(expected) < 240
    assert matched_some > 40, "the generated filters select something, and not everything"


def test_a_filtered_search_returns_the_nearest_matching_entries(client: Client, filtered) -> None:
    stores, entries = filtered
    rng = random.Random(9)
    times = sorted({entry["create_time"] for entry in entries})
    vectors = {e["id"]: np.asarray(e["vector"]) / np.linalg.norm(e["vector"]) for e in entries}
    found_total = expected_total = 0
    for _ in range(40):
        tree = random_filter(rng, times)
        query = np.asarray([rng.gauss(0, 1) for _ in range(8)])
        matching = [e["id"] for e in entries if holds(tree, e)]
        nearest = sorted(matching, key=lambda i: -float(vectors[i] @ query))[:10]
        for ranking in ("similarity", "store_aware"):
            results = client.search_memories(
                query_vector=query.tolist(), stores=stores, max_results=10, filter=tree, ranking=ranking
            )
            ids = [r.memory.id for r in results]
            assert set(ids) <= set(matching), "every result matches the filter"
            assert len(ids) == min(10, len(matching)), ranking
            if ranking == "similarity":
                found_total += len(set(ids) & set(nearest))
                expected_total += len(nearest)
    assert found_total == expected_total, "similarity within a filter is exact on stores this small"


def test_inject_takes_a_filter(client: Client, make_store) -> None:
    store = make_store()
    tea, coffee = unique("tea"), unique("coffee")
    client.add_memories(
        store,
        [
            {"id": tea, "content": "Drinks green tea", "metadata": {"topic": "drinks", "rating": 5}},
            {"id": coffee, "content": "Drinks coffee", "metadata": {"topic": "drinks", "rating": 1}},
        ],
    )
    result = client.inject([user("What does the user drink?")], stores=[store], filter={"rating": {"gte": 3}})
    assert [entry.id for entry in result.report.entries] == [tea]
    unfiltered = client.inject([user("What does the user drink?")], stores=[store])
    assert {entry.id for entry in unfiltered.report.entries} == {tea, coffee}


def test_the_python_filter_dict_reads_as_documented(client: Client, filtered) -> None:
    stores, entries = filtered
    as_dict = {"topic": {"in": ["food", "work"]}, "rating": {"gte": 2, "lt": 4}, "not": {"tags": {"contains": "a"}}}
    listed = {m.id for m in client.list_memories(stores[1], filter=as_dict, page_size=1000)}

    def expected(e: dict) -> bool:
        metadata = e["metadata"]
        rating = metadata.get("rating")
        tags = metadata.get("tags")
        return (
            metadata.get("topic") in ("food", "work")
            and isinstance(rating, int | float)
            and 2 <= rating < 4
            and not (isinstance(tags, list) and "a" in tags)
        )

    assert listed == {e["id"] for e in entries if e["store"] == stores[1] and expected(e)}
    assert listed


@pytest.mark.parametrize(
    ("tree", "field"),
    [
        ({"field": {"field": "rating", "equals": 1}}, "filter.field.field"),
        ({"field": {"field": "metadata.", "equals": 1}}, "filter.field.field"),
        ({"field": {"field": "metadata.`a", "equals": 1}}, "filter.field.field"),
        ({"field": {"field": "metadata.a"}}, "filter.field"),
        ({"field": {"field": "metadata.a", "equals": [1]}}, "filter.field.equals"),
        ({"field": {"field": "metadata.a", "in": []}}, "filter.field.in"),
        ({"field": {"field": "metadata.a", "range": {}}}, "filter.field.range"),
        (
            {"field": {"field": "metadata.a", "range": {"gt": {"number": 1}, "gte": {"number": 2}}}},
            "filter.field.range",
        ),
        (
            {"field": {"field": "metadata.a", "range": {"gt": {"time": "2026-01-01T00:00:00Z"}}}},
            "filter.field.range.gt",
        ),
        ({"field": {"field": "create_time", "range": {"gt": {"number": 1}}}}, "filter.field.range.gt"),
        ({"field": {"field": "create_time", "equals": "today"}}, "filter.field.equals"),
        ({"field": {"field": "create_time", "exists": True}}, "filter.field.exists"),
        ({"all": {}}, "filter.all.filters"),
        ({"any": {"filters": [{}]}}, "filter.any.filters[0]"),
        (
            {"not": {"not": {"not": {"not": {"not": {"not": {"not": {"not": {}}}}}}}}},
            "filter.not.not.not.not.not.not.not.not",
        ),
    ],
)
def test_an_invalid_filter_is_refused_naming_the_part(client: Client, filtered, tree: dict, field: str) -> None:
    stores, _ = filtered
    message = json_format.ParseDict(tree, memory_pb2.Filter())
    for call in (
        lambda: list(client.list_memories(stores[0], filter=message)),
        lambda: client.search_memories("x", stores=stores, filter=message),
        lambda: client.erase_memories(filter=message, stores=stores),
    ):
        with pytest.raises(InvalidArgument) as refused:
            call()
        assert refused.value.field_violations[0][0] == field, refused.value


def test_too_many_conditions_are_refused(client: Client, filtered) -> None:
    stores, _ = filtered
    conditions = [{"field": {"field": f"metadata.k{n}", "exists": True}} for n in range(65)]
    message = json_format.ParseDict({"any": {"filters": conditions}}, memory_pb2.Filter())
    with pytest.raises(InvalidArgument) as refused:
        list(client.list_memories(stores[0], filter=message))
    assert refused.value.field_violations[0][0] == "filter.any.filters[64]"


# Expiry


@pytest.fixture(scope="module")
def purging(postgres: Postgres, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A server of its own, on the module's Postgres, that purges expired entries every 0.2 s."""
    log = tmp_path_factory.mktemp("purging") / "server.log"
    process = start_server(log, "--database-url", postgres.url, "--purge-interval-seconds", "0.2")
    yield process
    assert process.stop() == 0, process.log()


def test_an_entry_is_gone_the_moment_it_expires(purging: ServerProcess) -> None:
    with Client(purging.address, timeout=30) as cf:
        store = unique("expiring")
        cf.create_store(store)
        expires = datetime.now(UTC) + timedelta(seconds=2)
        (entry,) = cf.add_memories(store, [{"content": "The door code is 4321", "expire_time": expires}])
        cf.add_memories(store, ["The office is on the third floor"])
        assert entry.expire_time.ToDatetime(tzinfo=UTC) == expires

        def visible() -> dict[str, bool]:
            return {
                "get": _exists(lambda: cf.get_memory(entry.id)),
                "search": any(r.memory.id == entry.id for r in cf.search_memories("door code", stores=[store])),
                "list": entry.id in [m.id for m in cf.list_memories(store)],
                "count": next(s.memory_count for s in cf.list_stores() if s.name == store) == 2,
                "inject": entry.id
                in [e.id for e in cf.inject([user("What is the door code?")], stores=[store]).report.entries],
            }

        # Each check is judged by when it was sent and when it was answered: before the expiry, the entry
        # is there; sent after it, it is not, whatever the purge has done yet.
        seen_before = seen_after = 0
        while datetime.now(UTC) < expires + timedelta(seconds=1):
            sent = datetime.now(UTC)
            seen = visible()
            answered = datetime.now(UTC)
            if answered < expires:
                assert all(seen.values()), seen
                seen_before += 1
            elif sent > expires:
                assert not any(seen.values()), seen
                seen_after += 1
        assert seen_before and seen_after
        assert [m.content for m in cf.list_memories(store)] == ["The office is on the third floor"]


def _exists(call) -> bool:
    try:
        call()
    except NotFound:
        return False
    return True


def test_a_store_ttl_expires_its_entries_and_the_purge_deletes_them(purging: ServerProcess, postgres: Postgres) -> None:
    import psycopg

    with Client(purging.address, timeout=30) as cf:
        store = unique("ttl")
        created = cf.create_store(store, default_ttl=1.5)
        assert created.default_ttl.ToTimedelta() == timedelta(seconds=1.5)
        (short,) = cf.add_memories(store, ["gone soon"])
        (kept,) = cf.add_memories(
            store, [{"content": "kept longer", "expire_time": datetime.now(UTC) + timedelta(hours=1)}]
        )
        lifetime = short.expire_time.ToDatetime() - short.create_time.ToDatetime()
        assert timedelta(seconds=1.4) < lifetime < timedelta(seconds=1.6)

        def rows() -> set[str]:
            with psycopg.connect(postgres.url, autocommit=True) as conn:
                return {
                    row[0] for row in conn.execute("SELECT id FROM contextfold.memories WHERE store = %s", (store,))
                }

        assert rows() == {short.id, kept.id}
        wait_for(lambda: rows() == {kept.id}, 15, what="the purge to delete the expired entry", interval=0.2)
        assert [m.id for m in cf.list_memories(store)] == [kept.id]


# Export and import


def test_an_export_imported_into_a_fresh_server_searches_the_same(
    client: Client, make_store, tmp_path_factory: pytest.TempPathFactory
) -> None:
    rng = random.Random(3)
    stores = [make_store("export-a"), make_store("export-b", dimension=8)]
    client.add_memories(
        stores[0],
        [
            {
                "id": f"text-{n}",
                "content": f"The user said fact number {n} about {rng.choice(['tea', 'rain', 'jazz'])}",
                "metadata": {"n": n},
                "user_id": rng.choice(["u1", "u2"]),
            }
            for n in range(120)
        ],
    )
    client.add_memories(
        stores[1],
        [{"id": f"vec-{n}", "content": f"v{n}", "vector": [rng.gauss(0, 1) for _ in range(8)]} for n in range(50)],
    )
    client.update_memory("text-3", content="The user said fact number 3 is about coffee")
    parts = list(client.export_memories(stores=stores))
    assert [s.name for s in parts[0].stores] == sorted(stores)
    exported = [memory for part in parts for memory in part.memories]
    assert len(exported) == 170 and all(len(m.vector) in (384, 8) for m in exported)

    with serving(tmp_path_factory.mktemp("import-target")) as fresh, Client(fresh.address, timeout=60) as target:
        totals = target.import_memories(parts)
        assert (totals.created_store_count, totals.added_count, totals.replaced_count) == (2, 170, 0)
        again = target.import_memories(parts)
        assert (again.created_store_count, again.added_count, again.unchanged_count) == (0, 0, 170)

        for query in ("tea", "coffee", "jazz music", "rain"):
            for scope in (None, {"user_id": "u2"}):
                before = client.search_memories(query, stores=[stores[0]], scope=scope, max_results=10)
                after = target.search_memories(query, stores=[stores[0]], scope=scope, max_results=10)
                assert [(r.memory.id, r.memory.content, r.memory.create_time) for r in before] == [
                    (r.memory.id, r.memory.content, r.memory.create_time) for r in after
                ]
                assert [round(r.score, 5) for r in before] == [round(r.score, 5) for r in after]
        probe = [rng.gauss(0, 1) for _ in range(8)]
        assert [r.memory.id for r in client.search_memories(query_vector=probe, stores=[stores[1]])] == [
            r.memory.id for r in target.search_memories(query_vector=probe, stores=[stores[1]])
        ]
        assert target.get_memory("text-3").update_time == client.get_memory("text-3").update_time


def test_an_import_of_another_dimension_is_refused_and_imports_nothing(client: Client, make_store) -> None:
    store = make_store("import-clash", dimension=8)
    part = memory_pb2.ImportMemoriesRequest(
        stores=[memory_pb2.Store(name=store, dimension=4)],
        memories=[memory_pb2.Memory(id=unique("clash"), store=store, content="x", vector=[1, 0, 0, 0])],
    )
    from contextfold import FailedPrecondition

    with pytest.raises(FailedPrecondition):
        client.import_memories([part])
    assert list(client.list_memories(store)) == []


def test_expiry_holds_at_the_boundary_on_every_read_path_by_a_controllable_clock(postgres: Postgres) -> None:
    """The store reads the time from the clock it is given: at a microsecond before the expiry the
    entry is there on every read path (a get, a list, a plain search, the per-store candidates of the
    rankings, a filtered search, a store's count); at the expiry and after, on none."""
    import asyncio
    from dataclasses import replace

    from contextfold_server.engine.filters import FieldTest, Test
    from contextfold_server.engine.memory import SearchQuery
    from contextfold_server.errors import NotFound as NotFoundError
    from contextfold_server.memory.records import NewMemory, Scope
    from contextfold_server.memory.statements import SEARCH_SETTINGS
    from contextfold_server.memory.store import PostgresMemoryStore
    from contextfold_server.postgres.migrations import migrate
    from contextfold_server.postgres.pool import Database

    expiry = datetime(2031, 5, 4, 12, 0, 0, tzinfo=UTC)
    tick = timedelta(microseconds=1)

    async def check() -> None:
        await migrate(postgres.url)
        database = await Database.open(postgres.url, session_settings=SEARCH_SETTINGS)
        clock = [expiry - timedelta(days=1)]
        store = PostgresMemoryStore(database, clock=lambda: clock[0])
        namespace = unique("clock")
        try:
            for name in ("a", "b"):
                await store.create_store(namespace, name, "", 3)
            await store.add_memories(
                namespace,
                "a",
                [
                    NewMemory("expires", (1.0, 0.0, 0.0), "soon", {"k": 1}, expire_time=expiry),
                    NewMemory("stays", (0.9, 0.1, 0.0), "kept", {"k": 1}),
                ],
            )
            await store.add_memories(namespace, "b", [NewMemory("other", (0.0, 1.0, 0.0), "b1", {"k": 1})])
            query = SearchQuery("", (1.0, 0.0, 0.0), (), 10, None, frozenset())
            filtered = FieldTest("metadata", ("k",), Test.EQUALS, 1)

            async def seen() -> dict[str, bool]:
                async def found(call) -> bool:
                    try:
                        return "soon" in await call()
                    except NotFoundError:
                        return False

                return {
                    "get": await found(lambda: _ids([store.get_memory(namespace, "soon")])),
                    "list": await found(lambda: _ids(store.list_memories(namespace, "a", Scope(), 0, 10))),
                    "search": await found(lambda: _ids(store.search(namespace, Scope(), query))),
                    "candidates": await found(lambda: _ids(store.candidates(namespace, Scope(), query, 8, 40))),
                    "filtered": await found(
                        lambda: _ids(store.candidates(namespace, Scope(), replace(query, filter=filtered), 8, 40))
                    ),
                    "count": (await store.list_stores(namespace, "", 10))[0].memory_count == 2,
                }

            for at, visible in ((expiry - tick, True), (expiry, False), (expiry + tick, False)):
                clock[0] = at
                assert await seen() == dict.fromkeys(
                    ("get", "list", "search", "candidates", "filtered", "count"), visible
                ), at
        finally:
            await database.close()

    asyncio.run(check())


async def _ids(awaitable) -> set[str]:
    """The ids a store call returned, whichever shape it returns them in."""
    if isinstance(awaitable, list):
        return {record.id for record in [await item for item in awaitable]}
    result = await awaitable
    if isinstance(result, tuple):
        result = result[1]
    return {getattr(item, "memory", item).id for item in result}


def test_a_filtered_search_that_finds_too_few_through_the_vector_index_reads_exactly(
    postgres: Postgres, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A filter four entries in 300 pass: the walk through the vector index finds fewer than asked for
    (all there are, or fewer: pgvector's walk stops early on rare filters), the exact read follows,
    and the search returns every matching entry, nearest first, for similarity and for the per-store
    candidates of the rankings."""
    import asyncio

    from contextfold_server.engine.filters import FieldTest, Test
    from contextfold_server.engine.memory import SearchQuery
    from contextfold_server.memory import store as store_module
    from contextfold_server.memory.records import NewMemory, Scope
    from contextfold_server.memory.statements import SEARCH_SETTINGS
    from contextfold_server.memory.store import PostgresMemoryStore
    from contextfold_server.postgres.migrations import migrate
    from contextfold_server.postgres.pool import Database
    from contextfold_server.postgres.vector_index import VectorIndexes

    exact_reads: list[bool] = []
    for name in ("search_statement", "candidates_statement"):
        composed = getattr(store_module, name)

        def spy(*args, composed=composed, **kwargs):
            exact_reads.append(kwargs.get("exact", False))
            return composed(*args, **kwargs)

        monkeypatch.setattr(store_module, name, spy)
    rng = np.random.default_rng(4)
    vectors = rng.normal(size=(300, 8))
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    seventh = [n % 97 == 0 for n in range(300)]

    async def check() -> None:
        await migrate(postgres.url)
        indexes = VectorIndexes(postgres.url)
        database = await Database.open(postgres.url, session_settings=SEARCH_SETTINGS)
        store = PostgresMemoryStore(database)
        namespace = unique("fallback")
        try:
            for name in ("a", "b"):
                await store.create_store(namespace, name, "", 8)
            await indexes.built(namespace, 8)
            entries = [NewMemory(f"e{n}", tuple(vectors[n]), f"e{n}", {"seventh": seventh[n]}) for n in range(300)]
            await store.add_memories(namespace, "a", entries[:200])
            await store.add_memories(namespace, "b", entries[200:])
            tree = FieldTest("metadata", ("seventh",), Test.EQUALS, True)
            for probe in range(5):
                target = vectors[probe * 11]
                query = SearchQuery("", tuple(target), (), 5, None, frozenset(), filter=tree)
                matching = sorted((n for n in range(300) if seventh[n]), key=lambda n: -float(vectors[n] @ target))
                exact_reads.clear()
                _, found = await store.search(namespace, Scope(), query)
                assert [r.memory.id for r in found] == [f"e{n}" for n in matching]
                assert exact_reads == [False, True], "fewer than asked for: the exact read followed"
                exact_reads.clear()
                _, candidates, _, _, _ = await store.candidates(namespace, Scope(), query, 8, 40)
                assert exact_reads == [False, True]
                per_store = [n for n in matching if n < 200][:8] + [n for n in matching if n >= 200][:8]
                assert {c.memory.id for c in candidates} == {f"e{n}" for n in per_store}
        finally:
            await database.close()
            await indexes.close()

    asyncio.run(check())
