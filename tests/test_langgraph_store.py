"""LangGraph's `BaseStore` kept in contextfold (`contextfold.langgraph.ContextfoldStore`), against a real
server, through LangGraph's own methods (`put`, `get`, `search`, `delete`, `list_namespaces` and their
async twins, which build LangGraph's operations and hand them to `batch`). LangGraph ships no
conformance suite for stores in its packages; these hold the behaviours its `BaseStore` documents.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from contextfold import Client, NotFound
from contextfold.langgraph import ContextfoldStore, entry_id
from langgraph.store.base import Item, SearchItem

from harness.messages import unique
from harness.servers import ServerProcess

from .pages import PAGES, blocks


@pytest.fixture
def store(server: ServerProcess, client: Client) -> Iterator[ContextfoldStore]:
    kept = ContextfoldStore(unique("langgraph"), target=server.address)
    yield kept
    kept.close()
    with contextlib.suppress(NotFound):
        client.delete_store(kept.store, force=True)


def test_an_item_put_is_got_with_its_value_key_namespace_and_times(store: ContextfoldStore, client: Client) -> None:
    store.put(("users", "ada", "prefs"), "seat", {"text": "Ada books an aisle seat", "rank": 2})
    item = store.get(("users", "ada", "prefs"), "seat")
    assert isinstance(item, Item)
    assert (item.namespace, item.key, item.value) == (
        ("users", "ada", "prefs"),
        "seat",
        {"text": "Ada books an aisle seat", "rank": 2},
    )
    assert item.created_at.tzinfo is not None and item.updated_at >= item.created_at
    # One entry of the store named, under the id the namespace and key make.
    entry = client.get_memory(entry_id(("users", "ada", "prefs"), "seat"))
    assert entry.store == store.store
    assert store.get(("users", "ada", "prefs"), "window") is None
    assert store.get(("users", "bob", "prefs"), "seat") is None


def test_a_put_under_the_same_key_replaces_the_value_and_a_delete_removes_it(store: ContextfoldStore) -> None:
    namespace = ("users", "ada")
    store.put(namespace, "diet", {"text": "Ada eats fish"})
    first = store.get(namespace, "diet")
    store.put(namespace, "diet", {"text": "Ada eats vegetarian"})
    second = store.get(namespace, "diet")
    assert second is not None and first is not None
    assert second.value == {"text": "Ada eats vegetarian"}
    assert second.created_at == first.created_at and second.updated_at > first.updated_at
    store.delete(namespace, "diet")
    assert store.get(namespace, "diet") is None
    store.delete(namespace, "diet")  # deleting what is gone is no error


def test_a_search_by_meaning_stays_in_its_namespace_prefix_and_filter(store: ContextfoldStore) -> None:
    store.put(("users", "ada"), "seat", {"text": "Ada always books an aisle seat", "rank": 1})
    store.put(("users", "ada"), "diet", {"text": "Ada eats vegetarian food", "rank": 3})
    store.put(("users", "ada", "trips"), "lisbon", {"text": "Ada flies to Lisbon in May", "rank": 5})
    store.put(("users", "bob"), "seat", {"text": "Bob wants a window seat", "rank": 1})

    found = store.search(("users", "ada"), query="which seat should I book?")
    assert all(isinstance(item, SearchItem) for item in found)
    assert found[0].key == "seat"
    assert {item.namespace for item in found} == {("users", "ada"), ("users", "ada", "trips")}
    assert found[0].score is not None and found[0].score > found[-1].score

    same_rank = store.search(("users",), query="seat", filter={"rank": 1}, limit=5)
    assert sorted((item.namespace, item.key) for item in same_rank) == [
        (("users", "ada"), "seat"),
        (("users", "bob"), "seat"),
    ]
    ranked = store.search(("users", "ada"), query="food", filter={"rank": {"$gte": 3}})
    assert {item.key for item in ranked} == {"diet", "lisbon"}
    assert {item.key for item in store.search(("users", "ada"), query="food", filter={"rank": {"$ne": 3}})} == {
        "seat",
        "lisbon",
    }
    assert len(store.search(("users", "ada"), query="food", limit=1, offset=1)) == 1


def test_a_search_without_a_query_lists_in_the_order_written(store: ContextfoldStore) -> None:
    assert store.search(("users",)) == []  # nothing written yet: the store is not made yet
    for number in range(5):
        store.put(("notes", "ada"), f"note-{number}", {"text": f"note {number}"})
    store.put(("notes", "bob"), "note-0", {"text": "bob's"})
    assert [item.key for item in store.search(("notes", "ada"))] == [f"note-{n}" for n in range(5)]
    assert [item.key for item in store.search(("notes", "ada"), limit=2, offset=1)] == ["note-1", "note-2"]
    assert all(item.score is None for item in store.search(("notes",)))


def test_namespaces_are_listed_by_prefix_suffix_and_depth(store: ContextfoldStore) -> None:
    for namespace in [("users", "ada", "prefs"), ("users", "ada", "trips"), ("users", "bob", "prefs"), ("teams", "x")]:
        store.put(namespace, "k", {"text": "-"})
    assert set(store.list_namespaces()) == {
        ("users", "ada", "prefs"),
        ("users", "ada", "trips"),
        ("users", "bob", "prefs"),
        ("teams", "x"),
    }
    assert set(store.list_namespaces(prefix=("users", "ada"))) == {("users", "ada", "prefs"), ("users", "ada", "trips")}
    assert set(store.list_namespaces(suffix=("prefs",))) == {("users", "ada", "prefs"), ("users", "bob", "prefs")}
    assert set(store.list_namespaces(prefix=("users", "*", "prefs"))) == {
        ("users", "ada", "prefs"),
        ("users", "bob", "prefs"),
    }
    assert set(store.list_namespaces(max_depth=2)) == {("users", "ada"), ("users", "bob"), ("teams", "x")}


def test_an_item_with_a_ttl_expires(store: ContextfoldStore) -> None:
    store.put(("cache",), "soon", {"text": "gone in a moment"}, ttl=1 / 60)  # minutes: one second
    store.put(("cache",), "kept", {"text": "kept"})
    assert store.get(("cache",), "soon") is not None
    time.sleep(1.5)
    assert store.get(("cache",), "soon") is None
    assert [item.key for item in store.search(("cache",))] == ["kept"]


def test_the_async_methods_work_as_the_sync_ones(store: ContextfoldStore) -> None:
    async def use() -> tuple[Item | None, list[SearchItem]]:
        await store.aput(("users", "ada"), "tea", {"text": "Ada drinks green tea"}, index=["text"])
        return await store.aget(("users", "ada"), "tea"), await store.asearch(("users",), query="tea")

    got, found = asyncio.run(use())
    assert got is not None and got.value == {"text": "Ada drinks green tea"}
    assert [item.key for item in found] == ["tea"]


def test_the_pages_example_prints_what_the_page_shows(server: ServerProcess, client: Client) -> None:
    section = PAGES["docs/langchain.md"].split("## LangGraph's store, kept in contextfold", 1)[1].split("\n## ", 1)[0]
    code = blocks(section, "python")[0]
    try:
        run = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "CONTEXTFOLD_ADDRESS": server.address},
        )
        assert run.returncode == 0, run.stderr
        assert run.stdout == blocks(section, "text")[0]
    finally:
        with contextlib.suppress(NotFound):
            client.delete_store("agent-memory", force=True)
