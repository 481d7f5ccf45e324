"""Filters as the README defines them, evaluated in Python entry by entry: the brute force the
server's compiled SQL is compared with, and a generator of random filters and metadata."""

from __future__ import annotations

import random
from datetime import datetime
from typing import Any

from contextfold.v1 import memory_pb2
from google.protobuf import json_format

MISSING = object()


def lookup(metadata: Any, path: list[str]) -> Any:
    """The value at `path` through objects only (a list is never indexed), or MISSING."""
    value = metadata
    for key in path:
        if not isinstance(value, dict) or key not in value:
            return MISSING
        value = value[key]
    return value


def same(stored: Any, wanted: Any) -> bool:
    """JSON equality of scalars: a bool is no number, numbers compare by value."""
    if isinstance(wanted, bool) or isinstance(stored, bool):
        return type(stored) is type(wanted) and stored == wanted
    if isinstance(wanted, int | float):
        return isinstance(stored, int | float) and float(stored) == float(wanted)
    return stored == wanted


def holds(node: memory_pb2.Filter, memory: dict[str, Any]) -> bool:
    kind = node.WhichOneof("kind")
    if kind == "all":
        return all(holds(child, memory) for child in node.all.filters)
    if kind == "any":
        return any(holds(child, memory) for child in node.any.filters)
    if kind == "not":
        return not holds(getattr(node, "not"), memory)
    test = node.field
    which = test.WhichOneof("test")
    if test.field in ("create_time", "update_time", "expire_time"):
        value = memory.get(test.field) or MISSING
    else:
        value = lookup(memory["metadata"], test.field.split(".")[1:])
    if which == "exists":
        return (value is not MISSING) == test.exists
    if value is MISSING:
        return False
    if which == "equals":
        return same(value, json_format.MessageToDict(test.equals))
    if which == "in":
        return any(same(value, wanted) for wanted in json_format.MessageToDict(getattr(test, "in")))
    if which == "contains":
        wanted = json_format.MessageToDict(test.contains)
        return isinstance(value, list) and any(same(item, wanted) for item in value)
    if isinstance(value, datetime):
        bounds = {name: getattr(test.range, name).time.ToDatetime().timestamp() for name in _set(test.range)}
        number = value.timestamp()
    else:
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        bounds = {name: getattr(test.range, name).number for name in _set(test.range)}
        number = float(value)
    checks = {"gt": number > bounds.get("gt", 0), "gte": number >= bounds.get("gte", 0)}
    checks |= {"lt": number < bounds.get("lt", 0), "lte": number <= bounds.get("lte", 0)}
    return all(checks[name] for name in bounds)


def _set(range_: memory_pb2.Range) -> list[str]:
    return [name for name in ("gt", "gte", "lt", "lte") if range_.HasField(name)]


TOPICS = ["food", "travel", "work", "music"]
CITIES = ["Lisbon", "Denver", "Oslo"]


def random_metadata(rng: random.Random) -> dict[str, Any]:
    """Metadata with keys present or not, of mixed types: what real entries hold."""
    metadata: dict[str, Any] = {}
    if rng.random() < 0.8:
        metadata["topic"] = rng.choice(TOPICS)
    roll = rng.random()
    if roll < 0.5:
        metadata["rating"] = rng.randint(1, 5)
    elif roll < 0.7:
        metadata["rating"] = round(rng.uniform(0, 5), 2)
    elif roll < 0.8:
        metadata["rating"] = str(rng.randint(1, 5))
    if rng.random() < 0.6:
        metadata["tags"] = rng.sample(["a", "b", "c", "d"], rng.randint(0, 3))
    elif rng.random() < 0.3:
        metadata["tags"] = rng.choice(["a", "b"])
    if rng.random() < 0.5:
        metadata["place"] = {"city": rng.choice(CITIES)}
    if rng.random() < 0.5:
        metadata["pinned"] = rng.random() < 0.5
    if rng.random() < 0.1:
        metadata["topic"] = None
    return metadata


def _value(value: Any) -> Any:
    converted = json_format.ParseDict(value, memory_pb2.Filter().field.equals)
    return converted


def random_filter(rng: random.Random, times: list[datetime], depth: int = 0) -> memory_pb2.Filter:
    roll = rng.random()
    if depth < 2 and roll < 0.3:
        kind = rng.choice(["all", "any"])
        children = [random_filter(rng, times, depth + 1) for _ in range(rng.randint(1, 3))]
        return memory_pb2.Filter(**{kind: memory_pb2.FilterList(filters=children)})
    if depth < 2 and roll < 0.4:
        return memory_pb2.Filter(**{"not": random_filter(rng, times, depth + 1)})
    choice = rng.randrange(8)
    field = memory_pb2.FieldFilter()
    if choice == 0:
        field.field = "metadata.topic"
        field.equals.CopyFrom(_value(rng.choice([*TOPICS, None])))
    elif choice == 1:
        field.field = "metadata.topic"
        getattr(field, "in").extend(rng.sample(TOPICS, rng.randint(1, 3)))
    elif choice == 2:
        field.field = "metadata.rating"
        low = rng.choice(["gt", "gte"])
        getattr(field.range, low).number = rng.choice([1, 2.5, 3])
        if rng.random() < 0.5:
            getattr(field.range, rng.choice(["lt", "lte"])).number = rng.choice([4, 4.5, 5])
    elif choice == 3:
        field.field = "metadata.tags"
        field.contains.CopyFrom(_value(rng.choice(["a", "b", "c"])))
    elif choice == 4:
        field.field = rng.choice(["metadata.tags", "metadata.place", "metadata.place.city", "metadata.topic"])
        field.exists = rng.random() < 0.5
    elif choice == 5:
        field.field = "metadata.place.city"
        field.equals.CopyFrom(_value(rng.choice(CITIES)))
    elif choice == 6:
        field.field = "metadata.pinned"
        field.equals.CopyFrom(_value(rng.random() < 0.5))
    else:
        field.field = "create_time"
        getattr(field.range, rng.choice(["gt", "gte", "lt", "lte"])).time.FromDatetime(rng.choice(times))
    return memory_pb2.Filter(field=field)
