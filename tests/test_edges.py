"""What the lifecycle promises holds at its edges: exact numbers, expiry that never swallows a write,
version times in order, imports that change nothing the second time, and errors that name the
field, show what the caller sent escaped, and never say INTERNAL."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import psutil
import pytest
from contextfold import Client, InvalidArgument, NotFound
from contextfold.v1 import memory_pb2
from contextfold_server.api.requests import check_compiles
from contextfold_server.customize.sandbox import Sandbox
from contextfold_server.errors import InvalidArgument as ServerInvalidArgument
from contextfold_server.errors import Unavailable

from harness.messages import user
from harness.polling import wait_for
from harness.servers import live_children

VECTOR = [1.0] * 8


@pytest.fixture
def store(make_store) -> str:
    return make_store("edges", dimension=8)


def test_a_numeric_range_compares_the_exact_number_the_metadata_holds(client: Client, store: str) -> None:
    client.add_memories(
        store,
        [
            {"id": f"{store}-at", "content": "at the mark", "metadata": {"t": 1733040000123456}, "vector": VECTOR},
            {"id": f"{store}-after", "content": "just after", "metadata": {"t": 1733040000123457}, "vector": VECTOR},
            {"id": f"{store}-third", "content": "a tenth", "metadata": {"x": 0.3}, "vector": VECTOR},
            {"id": f"{store}-sum", "content": "a sum", "metadata": {"x": 0.1 + 0.2}, "vector": VECTOR},
        ],
    )

    def listed(**test) -> set[str]:
        return {m.id.removeprefix(f"{store}-") for m in client.list_memories(store, filter=test)}

    assert listed(t={"gte": 1733040000123456}) == {"at", "after"}
    assert listed(t={"lte": 1733040000123456}) == {"at"}
    assert listed(t={"gt": 1733040000123456}) == {"after"}
    assert listed(x={"gte": 0.1 + 0.2}) == {"sum"}
    assert listed(x={"lt": 0.1 + 0.2}) == {"third"}


@pytest.mark.parametrize("number", [1e23, 1e300, -(2**60), 2**70, 1e-7])
def test_a_large_or_small_finite_number_in_metadata_is_stored_and_added_again_as_the_same(
    client: Client, store: str, number: float
) -> None:
    entry = {"id": f"{store}-n", "content": "a number", "metadata": {"m": number}, "vector": VECTOR}
    (added,) = client.add_memories(store, [entry])
    # Added again, the same entry is returned as stored, not refused as another.
    (again,) = client.add_memories(store, [entry])
    assert again.id == added.id and again.etag == added.etag
    assert again.metadata["m"] == pytest.approx(number, rel=1e-15)


def test_an_expired_entry_never_absorbs_or_refuses_a_new_one_under_its_id(client: Client, store: str) -> None:
    memory_id = f"{store}-door"
    soon = datetime.now(UTC) + timedelta(seconds=1)
    (old,) = client.add_memories(
        store, [{"id": memory_id, "content": "The door code is 1111", "vector": VECTOR, "expire_time": soon}]
    )
    wait_for(lambda: datetime.now(UTC) > soon, 5, what="the entry to expire")
    with pytest.raises(NotFound):
        client.get_memory(memory_id)
    # The same words under the same id: a new entry (the expired one is not handed back).
    (same,) = client.add_memories(store, [{"id": memory_id, "content": "The door code is 1111", "vector": VECTOR}])
    assert same.etag != old.etag and not same.HasField("expire_time")
    assert client.get_memory(memory_id).content == "The door code is 1111"
    client.update_memory(memory_id, expire_time=datetime.now(UTC) + timedelta(seconds=1))
    wait_for(lambda: not _exists(client, memory_id), 5, what="the entry to expire again")
    # Other words: stored, not refused as ALREADY_EXISTS.
    client.add_memories(store, [{"id": memory_id, "content": "The door code is 2222", "vector": VECTOR}])
    assert client.get_memory(memory_id).content == "The door code is 2222"


def _exists(client: Client, memory_id: str) -> bool:
    try:
        client.get_memory(memory_id)
    except NotFound:
        return False
    return True


def test_versions_are_stamped_in_the_order_their_updates_happened(client: Client, store: str) -> None:
    (entry,) = client.add_memories(store, [{"content": "version 1", "vector": VECTOR}])
    start = threading.Barrier(8)

    def update(n: int) -> None:
        start.wait()
        client.update_memory(entry.id, content=f"update {n}", vector=VECTOR)

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(update, range(8)))
    versions = sorted(client.list_memory_versions(entry.id), key=lambda v: v.version)
    times = [v.replace_time.ToDatetime(tzinfo=UTC) for v in versions]
    assert len(times) == 8 and times == sorted(times), "a later version was replaced later"
    latest = client.get_memory(entry.id)
    assert latest.update_time.ToDatetime(tzinfo=UTC) >= times[-1]


def test_importing_the_same_entries_twice_without_times_changes_nothing(client: Client, store: str) -> None:
    request = memory_pb2.ImportMemoriesRequest(
        memories=[
            memory_pb2.Memory(id=f"{store}-{n}", store=store, content=f"fact {n}", vector=VECTOR) for n in range(3)
        ]
    )
    first = client.import_memories([request])
    assert (first.added_count, first.replaced_count) == (3, 0)
    before = {m.id: (m.etag, m.create_time.ToDatetime()) for m in client.list_memories(store)}
    second = client.import_memories([request])
    assert (second.added_count, second.replaced_count, second.unchanged_count) == (0, 0, 3)
    assert {m.id: (m.etag, m.create_time.ToDatetime()) for m in client.list_memories(store)} == before


def test_an_expiry_in_the_past_is_refused_naming_the_field_and_nothing_is_stored(client: Client, store: str) -> None:
    past = datetime.now(UTC) - timedelta(minutes=1)
    with pytest.raises(InvalidArgument) as adding:
        client.add_memories(store, [{"content": "gone already", "vector": VECTOR, "expire_time": past}])
    assert [field for field, _ in adding.value.field_violations] == ["memories[0].expire_time"]
    assert list(client.list_memories(store)) == []
    (kept,) = client.add_memories(store, [{"content": "kept", "vector": VECTOR}])
    with pytest.raises(InvalidArgument) as updating:
        client.update_memory(kept.id, expire_time=past)
    assert [field for field, _ in updating.value.field_violations] == ["memory.expire_time"]
    assert not client.get_memory(kept.id).HasField("expire_time")


def test_an_import_error_names_the_request_it_came_in(client: Client, store: str) -> None:
    bad = memory_pb2.Memory(id=f"{store}-nan", store=store, content="not a number", vector=VECTOR)
    bad.metadata.update({"x": 1.0})
    bad.metadata.fields["x"].number_value = float("nan")
    good = memory_pb2.ImportMemoriesRequest(
        memories=[memory_pb2.Memory(id=f"{store}-ok", store=store, content="ok", vector=VECTOR)]
    )
    with pytest.raises(InvalidArgument) as refused:
        client.import_memories([good, memory_pb2.ImportMemoriesRequest(memories=[bad])])
    assert [field for field, _ in refused.value.field_violations] == ["requests[1].memories[0].metadata.x"]


def test_an_error_shows_the_control_characters_it_quotes_escaped(client: Client) -> None:
    for refuse in (
        lambda: client.inject([user("hi")], trigger_expression="true \x00 false"),
        lambda: client.register_provider("nul", "127.0.0.1:9", trigger_expression="true \x00 false"),
    ):
        with pytest.raises(InvalidArgument) as refused:
            refuse()
        ((field, description),) = refused.value.field_violations
        assert field.endswith("trigger_expression")
        assert "\x00" not in description and "\x00" not in refused.value.message
    # Whatever a description quotes, it goes out with its control characters as escapes.
    quoted = ServerInvalidArgument.of("trigger_expression", "token recognition error at: '\x00\x1b[2J'")
    assert str(quoted) == "trigger_expression: token recognition error at: '\\x00\\x1b[2J'"


def sandbox_workers() -> list[psutil.Process]:
    """The sandbox workers this process started (not the servers the tests run)."""
    return [
        child for child, command in live_children(psutil.Process()) if "contextfold_server.customize.worker" in command
    ]


def test_a_sandbox_that_fails_under_a_check_gives_no_verdict_and_no_internal_error() -> None:
    """Its workers killed (a machine out of memory, say): the check says UNAVAILABLE for what would be
    stored, and lets a call's own expression go on unchecked (to fail open), never INTERNAL."""

    async def scenario() -> tuple[BaseException | None, BaseException | None]:
        sandbox = Sandbox(workers=1, time_limit=5)
        await sandbox.start()
        try:

            async def with_its_worker_killed(to_store: bool) -> BaseException | None:
                workers = sandbox_workers()
                for worker in workers:
                    worker.kill()
                psutil.wait_procs(workers, timeout=10)
                try:
                    await check_compiles(sandbox, [("query", f"'{to_store}'", "q")], "tenant", 5.0, to_store=to_store)
                except Exception as error:  # noqa: BLE001 - the outcome under test
                    return error
                return None

            stored = await with_its_worker_killed(True)
            # The sandbox heals: its worker is replaced, and a check gives its verdict again.
            await asyncio.to_thread(wait_for, sandbox_workers, 30, what="a new worker")
            per_call = await with_its_worker_killed(False)
            return stored, per_call
        finally:
            await sandbox.close()

    stored, per_call = asyncio.run(scenario())
    assert isinstance(stored, Unavailable) and stored.reason == "SANDBOX_FAILED", stored
    assert per_call is None


def test_a_query_expression_that_returns_nothing_is_named_in_the_report(client: Client, store: str) -> None:
    result = client.inject([user("what do I like?")], stores=[store], query_expression="''")
    assert not result.report.injected
    assert result.report.detail == "the query expression returned no text"
    blank = client.inject([user("what do I like?")], stores=[store], query=" ")
    assert blank.report.detail == "memory.query is blank"
