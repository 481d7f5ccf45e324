"""`MemoryService`: stores, entries, idempotent adds, dimensions, scopes, pagination and bad input."""

from __future__ import annotations

import pytest
from contextfold import AlreadyExists, Client, FailedPrecondition, InvalidArgument, NotFound
from google.protobuf.timestamp_pb2 import Timestamp

from harness.messages import unique


def test_store_lifecycle(client: Client, make_store) -> None:
    name = make_store(description="what the user likes")
    listed = {store.name: store for store in client.list_stores()}
    assert listed[name].dimension == 384
    assert listed[name].description == "what the user likes"

    with pytest.raises(AlreadyExists):
        client.create_store(name)

    client.add_memories(name, ["one entry"])
    with pytest.raises(FailedPrecondition):
        client.delete_store(name)
    assert [m.content for m in client.list_memories(name)] == ["one entry"], "a refused delete deletes nothing"
    assert client.delete_store(name, force=True) == 1
    assert name not in {store.name for store in client.list_stores()}
    with pytest.raises(NotFound):
        client.delete_store(name)


def test_a_retried_add_with_the_same_ids_is_idempotent(client: Client, make_store) -> None:
    store = make_store()
    batch = [
        {"id": "pref-1", "content": "Likes tea", "metadata": {"confidence": 0.9}},
        {"id": "pref-2", "content": "Hates coffee"},
    ]
    first = client.add_memories(store, batch)
    second = client.add_memories(store, batch)

    assert [(m.id, m.content, m.create_time) for m in first] == [(m.id, m.content, m.create_time) for m in second]
    assert [m.id for m in client.list_memories(store)] == ["pref-1", "pref-2"]
    assert dict(client.get_memory("pref-1").metadata) == {"confidence": 0.9}


def test_an_add_that_conflicts_changes_nothing(client: Client, make_store) -> None:
    store = make_store()
    client.add_memories(store, [{"id": "fixed", "content": "original"}])
    with pytest.raises(AlreadyExists) as raised:
        client.add_memories(store, [{"id": "fresh", "content": "new"}, {"id": "fixed", "content": "changed"}])
    assert "memories[1].id" in raised.value.message
    assert [m.content for m in client.list_memories(store)] == ["original"], "the batch is all or nothing"


def test_vectors_must_match_the_store_dimension(client: Client, make_store) -> None:
    store = make_store(dimension=3)
    added = client.add_memories(store, [{"content": "three dims", "vector": [0.1, 0.2, 0.3]}])
    with pytest.raises(InvalidArgument) as wrong_length:
        client.add_memories(store, [{"content": "two dims", "vector": [0.1, 0.2]}])
    assert wrong_length.value.field_violations == [("memories[0].vector", f"has 2 dimensions; store {store!r} has 3")]
    with pytest.raises(InvalidArgument) as needs_vector:
        client.add_memories(store, ["the server embeds at 384 dimensions"])
    assert needs_vector.value.field_violations[0][0] == "memories[0].vector"
    with pytest.raises(InvalidArgument) as wrong_query:
        client.search_memories(query_vector=[1.0, 0.0], stores=[store])
    assert wrong_query.value.field_violations[0][0] == "query_vector"

    (hit,) = client.search_memories(query_vector=[0.1, 0.2, 0.3], stores=[store])
    assert hit.memory.id == added[0].id and hit.score == pytest.approx(1.0, abs=1e-5)
    assert [m.content for m in client.list_memories(store)] == ["three dims"]


def test_search_ranks_by_meaning_and_respects_scope(client: Client, make_store) -> None:
    store = make_store()
    client.add_memories(
        store,
        [
            {"content": "Alice's flight to Lisbon leaves at 9am", "user_id": "alice", "session_id": "s1"},
            {"content": "Alice loves sardines", "user_id": "alice", "session_id": "s2"},
            {"content": "Bob's flight to Oslo leaves at noon", "user_id": "bob"},
        ],
    )
    everyone = client.search_memories("When does my flight leave?", stores=[store], max_results=3)
    assert "flight" in everyone[0].memory.content and "flight" in everyone[1].memory.content

    alice = client.search_memories("When does my flight leave?", stores=[store], scope={"user_id": "alice"})
    assert [r.memory.user_id for r in alice] == ["alice", "alice"]
    session = client.search_memories("flight", stores=[store], scope={"user_id": "alice", "session_id": "s2"})
    assert [r.memory.content for r in session] == ["Alice loves sardines"]
    assert [m.content for m in client.list_memories(store, scope={"user_id": "bob"})] == [
        "Bob's flight to Oslo leaves at noon"
    ]


def test_list_memories_pages_in_insertion_order(client: Client, make_store) -> None:
    store = make_store()
    client.add_memories(store, [f"entry {n:02d}" for n in range(7)])
    assert [m.content for m in client.list_memories(store, page_size=3)] == [f"entry {n:02d}" for n in range(7)]


def test_a_page_token_only_fits_its_own_request(server, make_store) -> None:
    import grpc
    from contextfold.v1 import memory_pb2, memory_pb2_grpc

    store = make_store()
    other = make_store()
    with Client(server.address) as cf:
        cf.add_memories(store, ["a", "b", "c"])
    with grpc.insecure_channel(server.address) as channel:
        stub = memory_pb2_grpc.MemoryServiceStub(channel)
        page = stub.ListMemories(memory_pb2.ListMemoriesRequest(store=store, page_size=2))
        assert page.next_page_token
        with pytest.raises(grpc.RpcError) as raised:
            stub.ListMemories(memory_pb2.ListMemoriesRequest(store=other, page_token=page.next_page_token))
        assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "page_token" in raised.value.details()


def test_delete_memories_is_all_or_nothing_unless_missing_is_allowed(client: Client, make_store) -> None:
    store = make_store()
    kept = client.add_memories(store, ["keep me"])[0]
    with pytest.raises(NotFound):
        client.delete_memories([kept.id, "not-there"])
    assert client.get_memory(kept.id).content == "keep me"
    assert client.delete_memories([kept.id, "not-there"], allow_missing=True) == 1
    with pytest.raises(NotFound) as raised:
        client.get_memory(kept.id)
    assert raised.value.details[0].resource_name == kept.id


def nested(depth: int) -> dict:
    """Metadata `depth` objects deep: {"a": {"a": … {"a": 1}}}."""
    value: object = 1
    for _ in range(depth):
        value = {"a": value}
    return value  # type: ignore[return-value]


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda cf, s: cf.create_store(""), "store.name"),
        (lambda cf, s: cf.create_store("x" * 64), "store.name"),
        (lambda cf, s: cf.create_store(unique("d"), dimension=4000), "store.dimension"),
        (lambda cf, s: cf.add_memories(s, []), "memories"),
        (lambda cf, s: cf.add_memories(s, ["  "]), "memories[0].content"),
        (lambda cf, s: cf.add_memories(s, [{"content": "x", "id": "has space"}]), "memories[0].id"),
        (
            lambda cf, s: cf.add_memories(s, [{"content": "x", "id": "a"}, {"content": "y", "id": "a"}]),
            "memories[1].id",
        ),
        (lambda cf, s: cf.add_memories(s, [{"content": "x", "vector": [0.0, 0.0, 0.0]}]), "memories[0].vector"),
        (lambda cf, s: cf.add_memories(s, ["nul \x00 byte"]), "memories[0].content"),
        (lambda cf, s: cf.add_memories(s, [{"content": "x", "metadata": {"k": "nul \x00"}}]), "memories[0].metadata.k"),
        (lambda cf, s: cf.add_memories(s, ["bell \x07"]), "memories[0].content"),
        (
            lambda cf, s: cf.add_memories(s, [{"content": "x", "metadata": {"n": float("nan")}}]),
            "memories[0].metadata.n",
        ),
        (
            lambda cf, s: cf.add_memories(s, [{"content": "x", "metadata": {"l": [1.0, float("-inf")]}}]),
            "memories[0].metadata.l[1]",
        ),
        (
            lambda cf, s: cf.add_memories(s, [{"content": "x", "metadata": {"big": "m" * 20_000}}]),
            "memories[0].metadata",
        ),
        (
            lambda cf, s: cf.add_memories(s, [{"content": "x", "metadata": nested(20)}]),
            "memories[0].metadata" + ".a" * 16,
        ),
        (lambda cf, s: cf.add_memories(s, [{"content": "x", "vector": [1.0] * 2001}]), "memories[0].vector"),
        (lambda cf, s: cf.create_store(unique("d"), description="d" * 1025), "store.description"),
        (lambda cf, s: cf.create_store(unique("d"), description="nul \x00"), "store.description"),
        (lambda cf, s: cf.search_memories("q" * 16_385), "query"),
        (lambda cf, s: cf.search_memories("", query_vector=[0.5] * 2001), "query_vector"),
        (lambda cf, s: cf.add_memories(s, [{"content": "x", "user_id": "a\nb"}]), "memories[0].user_id"),
        (lambda cf, s: cf.search_memories("q", scope={"session_id": "s" * 129}), "scope.session_id"),
        (lambda cf, s: cf.search_memories("  "), "query"),
        (lambda cf, s: cf.search_memories("q", max_results=1000), "max_results"),
        (lambda cf, s: cf.search_memories("q", min_score=-2.0), "min_score"),
        (lambda cf, s: cf.search_memories("q", asked_time=Timestamp(seconds=253_402_300_800)), "asked_time"),
        (lambda cf, s: list(cf.list_memories(s, page_size=-1)), "page_size"),
        (lambda cf, s: cf.get_memory(""), "id"),
        (lambda cf, s: cf.delete_memories([]), "ids"),
    ],
)
def test_bad_input_is_invalid_argument_naming_the_field_and_changes_nothing(
    client: Client, make_store, call, field
) -> None:
    store = make_store()
    client.add_memories(store, ["untouched"])
    with pytest.raises(InvalidArgument) as raised:
        call(client, store)
    assert raised.value.field_violations[0][0] == field
    assert [m.content for m in client.list_memories(store)] == ["untouched"]


def test_unknown_names_are_not_found(client: Client) -> None:
    with pytest.raises(NotFound):
        client.add_memories("no-such-store", ["x"])
    with pytest.raises(NotFound):
        client.search_memories("x", stores=["no-such-store"])
    with pytest.raises(NotFound):
        list(client.list_memories("no-such-store"))
    with pytest.raises(NotFound):
        client.get_memory("no-such-id")


def test_a_forged_or_altered_page_token_is_invalid_argument_not_internal(server, client, make_store) -> None:
    import grpc
    from contextfold.v1 import memory_pb2, memory_pb2_grpc, provider_pb2, provider_pb2_grpc
    from contextfold_server.api.paging import PageTokens

    # Tokens of the right shape, signed with a key that is not the service's.
    encode_page_token = PageTokens(b"a key the service does not hold").encode
    store = make_store(dimension=2)
    client.add_memories(store, [{"content": f"fact {n}", "vector": [1.0, float(n)]} for n in range(3)])
    with grpc.insecure_channel(server.address) as channel:
        listing = memory_pb2_grpc.MemoryServiceStub(channel).ListMemories
        genuine = listing(memory_pb2.ListMemoriesRequest(store=store, page_size=1)).next_page_token
        assert listing(memory_pb2.ListMemoriesRequest(store=store, page_size=1, page_token=genuine)).memories
    middle = len(genuine) // 2
    altered = genuine[:middle] + ("A" if genuine[middle] != "A" else "B") + genuine[middle + 1 :]
    calls = [
        ("ListMemories", memory_pb2.ListMemoriesRequest(store=store, page_token=altered)),
        ("ListMemories", memory_pb2.ListMemoriesRequest(store=store, page_token="\x00.\x00")),
        ("ListStores", memory_pb2.ListStoresRequest(page_token=encode_page_token({"not": "a name"}))),
        (
            "ListMemories",
            memory_pb2.ListMemoriesRequest(store=store, page_token=encode_page_token(1, store, "", "", "")),
        ),
        ("ListProviders", provider_pb2.ListProvidersRequest(page_token=encode_page_token([0, 1]))),
        ("ListStores", memory_pb2.ListStoresRequest(page_token="not base64 at all!")),
    ]
    with grpc.insecure_channel(server.address) as channel:
        stubs = {"ListProviders": provider_pb2_grpc.ProviderServiceStub(channel)}
        memory = memory_pb2_grpc.MemoryServiceStub(channel)
        for method, request in calls:
            with pytest.raises(grpc.RpcError) as raised:
                getattr(stubs.get(method, memory), method)(request)
            assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT, method
            assert raised.value.details() == "page_token: is not a token this service issued"


def test_the_largest_accepted_entries_read_back_at_default_page_sizes(server, client: Client, make_store) -> None:
    import grpc
    from contextfold.v1 import memory_pb2, memory_pb2_grpc
    from contextfold_server.api.fields import MAX_CONTENT_CHARS, MAX_METADATA_BYTES
    from google.protobuf import struct_pb2

    store = make_store()
    # Every field at its limit, in characters that take four bytes where characters are counted.
    content = "\U0001d11e" * MAX_CONTENT_CHARS
    metadata = {"note": "m" * (MAX_METADATA_BYTES - 40)}
    encoded = struct_pb2.Struct()
    encoded.update(metadata)
    assert MAX_METADATA_BYTES - 64 < encoded.ByteSize() <= MAX_METADATA_BYTES
    scope = {key: "\u00e9" * 128 for key in ("user_id", "agent_id", "session_id")}
    ids = [f"{n:03d}" + "i" * 125 for n in range(60)]
    for batch in range(0, len(ids), 15):
        client.add_memories(
            store,
            [
                {"id": memory_id, "content": content, "metadata": metadata, "vector": [1.0, n / 100] * 192, **scope}
                for n, memory_id in enumerate(ids[batch : batch + 15], start=batch)
            ],
        )

    # A stub with gRPC's defaults: it takes responses of 4 MiB at most.
    with grpc.insecure_channel(server.address) as channel:
        stub = memory_pb2_grpc.MemoryServiceStub(channel)
        pages: list[list[str]] = []
        token = ""
        while True:
            page = stub.ListMemories(memory_pb2.ListMemoriesRequest(store=store, page_token=token))
            pages.append([memory.id for memory in page.memories])
            assert all(memory.content == content for memory in page.memories)
            if not (token := page.next_page_token):
                break
        assert [memory_id for page_ids in pages for memory_id in page_ids] == ids
        assert len(pages[0]) < 50, "a default page of 50 such entries would not fit one response: pages hold fewer"
        found = stub.SearchMemories(
            memory_pb2.SearchMemoriesRequest(query_vector=[1.0, 0.3] * 192, stores=[store], max_results=100)
        ).results
        assert 0 < len(found) < len(ids) and found[0].memory.id == ids[30]


def test_a_page_token_tells_its_holder_nothing(server, client: Client, make_store) -> None:
    """Positions are row sequences that every tenant's writes advance: a token is encrypted, so it
    shows none, and two tokens for the same position differ."""
    import base64

    import grpc
    from contextfold.v1 import memory_pb2, memory_pb2_grpc

    store = make_store(dimension=2)
    client.add_memories(store, [{"content": f"fact {n}", "vector": [1.0, float(n)]} for n in range(3)])
    with grpc.insecure_channel(server.address) as channel:
        listing = memory_pb2_grpc.MemoryServiceStub(channel).ListMemories
        tokens = [listing(memory_pb2.ListMemoriesRequest(store=store, page_size=1)).next_page_token for _ in range(2)]
    assert tokens[0] != tokens[1]
    sealed = base64.urlsafe_b64decode(tokens[0] + "=" * (-len(tokens[0]) % 4))
    assert b"after" not in sealed and b"key" not in sealed
