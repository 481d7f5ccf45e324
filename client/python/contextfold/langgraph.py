"""LangGraph's `BaseStore` kept in contextfold: an agent's long-term memory, searched by meaning.

    from contextfold.langgraph import ContextfoldStore
    from langchain.agents import create_agent

    agent = create_agent(model, tools, store=ContextfoldStore("langgraph"))

How LangGraph's terms map to contextfold's (docs/langchain.md says it too):

- A `ContextfoldStore` keeps its items in one contextfold store (`store`, made on the first
  write if it does not exist), in the namespace of the client's API key.
- An item is one entry: its id derived from the item's namespace and key (`lg-` and a hash),
  its `value` and where it belongs in its metadata (`value`; `langgraph.key`, `langgraph.depth`,
  `langgraph.ns.n0`, `n1`, … the namespace's labels), its content what is searched by meaning:
  the value as JSON, or the text of the fields `index` names.
- `put` is an upsert under that id (`UpdateMemory` with `allow_missing`); a `ttl` (minutes,
  LangGraph's unit) sets the entry's expiry; `delete` deletes it.
- `search` with a `query` is `SearchMemories` over the store, the namespace prefix and `filter`
  (on the value's fields: equality, `$eq`, `$ne`, `$gt`, `$gte`, `$lt`, `$lte`) as metadata
  filters; each item's `score` is its similarity. Without a query, the items in the order they
  were written. `list_namespaces` reads the namespaces of the store's items.

The async methods run the synchronous client in a worker thread. Install with
`pip install 'contextfold[langchain]'`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import threading
from collections.abc import Iterable, Iterator, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from langgraph.store.base import (
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
)
from langgraph.store.base.embed import get_text_at_path

from .client import Client
from .convert import message_dict
from .errors import AlreadyExists, NotFound

# Where an item's place is kept in its entry's metadata, beside its value.
PLACE = "langgraph"
VALUE = "value"
# LangGraph's filter operators, as contextfold's filters name them.
_OPERATORS = {"$eq": "eq", "$gt": "gt", "$gte": "gte", "$lt": "lt", "$lte": "lte"}
# How many entries a listing reads a page.
_PAGE = 1000


def entry_id(namespace: tuple[str, ...], key: str) -> str:
    """The id of the entry holding the item `key` of `namespace`."""
    digest = hashlib.sha256(json.dumps([list(namespace), key]).encode()).hexdigest()
    return f"lg-{digest[:40]}"


class ContextfoldStore(BaseStore):
    """A LangGraph store whose items are entries of the contextfold store `store`.

    The client is made from `target` (else `CONTEXTFOLD_ADDRESS`, else localhost:50051) and `api_key`
    (else `CONTEXTFOLD_API_KEY`), unless one is given; `close()` closes the one it made. `timeout`
    (seconds) bounds each call.
    """

    supports_ttl = True

    def __init__(
        self,
        store: str = "langgraph",
        *,
        client: Client | None = None,
        target: str | None = None,
        api_key: str | None = None,
        timeout: float = 10.0,
    ) -> None:
        self.store = store
        self._made = client is None
        self._client = client or Client(target, api_key=api_key, timeout=timeout)
        self._created = False
        self._lock = threading.Lock()

    def close(self) -> None:
        if self._made:
            self._client.close()

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        return [self._run(op) for op in ops]

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return await asyncio.to_thread(self.batch, list(ops))

    def _run(self, op: Op) -> Result:
        if isinstance(op, GetOp):
            return self._get(op)
        if isinstance(op, SearchOp):
            return self._search(op)
        if isinstance(op, PutOp):
            self._put(op)
            return None
        if isinstance(op, ListNamespacesOp):
            return self._namespaces(op)
        raise ValueError(f"unknown operation: {type(op).__name__}")

    def _get(self, op: GetOp) -> Item | None:
        try:
            memory = self._client.get_memory(entry_id(op.namespace, op.key))
        except NotFound:
            return None
        return _item(memory)

    def _put(self, op: PutOp) -> None:
        memory_id = entry_id(op.namespace, op.key)
        if op.value is None:
            self._client.delete_memories([memory_id], allow_missing=True)
            return
        self._ensure_store()
        place = {"key": op.key, "depth": len(op.namespace), "ns": _labels(op.namespace)}
        ttl = getattr(op, "ttl", None)
        self._client.update_memory(
            memory_id,
            store=self.store,
            content=_content(op.value, op.index),
            metadata={VALUE: op.value, PLACE: place},
            expire_time=datetime.now(UTC) + timedelta(minutes=ttl) if ttl else None,
            allow_missing=True,
        )

    def _ensure_store(self) -> None:
        with self._lock:
            if not self._created:
                with contextlib.suppress(AlreadyExists):
                    self._client.create_store(self.store, description="LangGraph's store (contextfold.langgraph)")
                self._created = True

    def _search(self, op: SearchOp) -> list[SearchItem]:
        conditions = _prefix(op.namespace_prefix) | _value_filter(op.filter or {})
        wanted = op.offset + op.limit
        if op.query:
            found = self._client.search_memories(
                op.query, stores=[self.store], max_results=wanted, filter=conditions or None
            )
            return [_found(result.memory, result.score) for result in found[op.offset : wanted]]
        listed = self._listed(conditions)
        return [_found(memory, None) for memory in _slice(listed, op.offset, wanted)]

    def _listed(self, conditions: dict[str, Any]) -> Iterator[Any]:
        try:
            yield from self._client.list_memories(self.store, filter=conditions or None, page_size=_PAGE)
        except NotFound:  # the store is made on the first write: before it, there is nothing
            return

    def _namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        prefixes = [condition.path for condition in op.match_conditions or () if condition.match_type == "prefix"]
        suffixes = [condition.path for condition in op.match_conditions or () if condition.match_type == "suffix"]
        conditions = _prefix(prefixes[0]) if len(prefixes) == 1 and "*" not in prefixes[0] else {}
        found: dict[tuple[str, ...], None] = {}
        for memory in self._listed(conditions):
            namespace = _item(memory).namespace
            if all(_matches(namespace, path) for path in prefixes) and all(
                _matches(namespace[::-1], path[::-1]) for path in suffixes
            ):
                found.setdefault(namespace[: op.max_depth] if op.max_depth is not None else namespace)
        return list(found)[op.offset : op.offset + op.limit]


def _labels(namespace: tuple[str, ...]) -> dict[str, str]:
    return {f"n{index}": label for index, label in enumerate(namespace)}


def _prefix(prefix: tuple[str, ...]) -> dict[str, Any]:
    """The metadata conditions an entry meets when its namespace begins with `prefix` (`*`: any label)."""
    return {f"{PLACE}.ns.n{index}": label for index, label in enumerate(prefix) if label != "*"}


def _matches(namespace: tuple[str, ...], path: tuple[str, ...]) -> bool:
    return len(namespace) >= len(path) and all(
        label in ("*", have) for label, have in zip(path, namespace, strict=False)
    )


def _value_filter(given: dict[str, Any]) -> dict[str, Any]:
    """LangGraph's filter on the value's fields as contextfold's on the metadata's `value`."""
    conditions: dict[str, Any] = {}
    for field, test in given.items():
        path = f"{VALUE}.{field}"
        if not isinstance(test, dict):
            conditions[path] = test
            continue
        tests = {_OPERATORS[name]: value for name, value in test.items() if name in _OPERATORS}
        unknown = set(test) - set(_OPERATORS) - {"$ne"}
        if unknown:
            raise ValueError(f"filter on {field!r}: {', '.join(sorted(unknown))} is not one LangGraph defines")
        if "$ne" in test:
            conditions.setdefault("all", []).append({"not": {path: test["$ne"]}})
        if tests:
            conditions[path] = tests
    return conditions


def _content(value: Mapping[str, Any], index: list[str] | bool | None) -> str:
    """What an item is searched by: the text of the fields `index` names, else the whole value as JSON."""
    if isinstance(index, list) and index:
        texts = [text for path in index for text in get_text_at_path(value, path)]
        if texts:
            return "\n".join(texts)
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def _slice(items: Iterator[Any], start: int, stop: int) -> Iterator[Any]:
    for number, item in enumerate(items):
        if number >= stop:
            return
        if number >= start:
            yield item


def _fields(memory: Any) -> dict[str, Any]:
    """An item's fields, as its entry holds them."""
    metadata = message_dict(memory).get("metadata", {})
    place = metadata.get(PLACE, {})
    labels = place.get("ns", {})
    namespace = tuple(labels[f"n{index}"] for index in range(int(place.get("depth", len(labels)))))
    created = memory.create_time.ToDatetime(tzinfo=UTC)
    updated = memory.update_time.ToDatetime(tzinfo=UTC) if memory.HasField("update_time") else created
    value = metadata.get(VALUE, {})
    return {
        "value": value,
        "key": place.get("key", ""),
        "namespace": namespace,
        "created_at": created,
        "updated_at": updated,
    }


def _item(memory: Any) -> Item:
    return Item(**_fields(memory))


def _found(memory: Any, score: float | None) -> SearchItem:
    return SearchItem(**_fields(memory), score=score)
