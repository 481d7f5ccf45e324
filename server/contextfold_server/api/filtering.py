"""`Filter` messages to the engine's filters (engine/filters.py), each part checked and named when wrong.

A filter holds at most `MAX_FILTER_CONDITIONS` conditions, `MAX_FILTER_DEPTH`
levels deep, `MAX_IN_VALUES` values in one membership test and `MAX_FILTER_VALUES`
in all its membership tests: the statement it compiles to stays small, and the work
it asks of each row it reads stays small too, whatever a caller sends.
"""

from __future__ import annotations

import math
from datetime import UTC
from typing import Any

from contextfold.v1 import memory_pb2
from google.protobuf import struct_pb2

from ..engine.filters import BOUNDS, METADATA, TIME_FIELDS, AllOf, AnyOf, FieldTest, Filter, Not, Test
from ..errors import InvalidArgument
from .fields import MAX_METADATA_BYTES, check_text

MAX_FILTER_CONDITIONS = 64
MAX_FILTER_DEPTH = 8
MAX_IN_VALUES = 100
# Values compared in all of a filter's membership tests, each against every row read.
MAX_FILTER_VALUES = 500
# A key in a field's path, and a string compared with: no longer than this.
MAX_FILTER_TEXT = 1024


def filter_from_proto(message: memory_pb2.Filter, field: str, present: bool) -> Filter | None:
    """The filter at `field` of a request, or None when the request has none (`present` is false)."""
    if not present:
        return None
    size = message.ByteSize()
    if size > MAX_METADATA_BYTES:
        raise InvalidArgument.of(field, f"takes {size} bytes encoded; the limit is {MAX_METADATA_BYTES}")
    return _node(message, field, 1, _Budget())


class _Budget:
    """What a filter has spent so far of its limits: conditions, and membership values."""

    def __init__(self) -> None:
        self.conditions = 0
        self.values = 0


def _node(message: memory_pb2.Filter, field: str, depth: int, budget: _Budget) -> Filter:
    if depth > MAX_FILTER_DEPTH:
        raise InvalidArgument.of(field, f"nests more than {MAX_FILTER_DEPTH} levels of filters")
    kind = message.WhichOneof("kind")
    if kind is None:
        raise InvalidArgument.of(field, "sets no kind: one of field, all, any or not")
    if kind == "field":
        budget.conditions += 1
        if budget.conditions > MAX_FILTER_CONDITIONS:
            raise InvalidArgument.of(field, f"is past the limit of {MAX_FILTER_CONDITIONS} conditions in a filter")
        return _field_test(message.field, f"{field}.field", budget)
    if kind == "not":
        return Not(_node(getattr(message, "not"), f"{field}.not", depth + 1, budget))
    filters = getattr(message, kind).filters
    if not filters:
        raise InvalidArgument.of(f"{field}.{kind}.filters", "must hold at least one filter")
    children = tuple(
        _node(child, f"{field}.{kind}.filters[{index}]", depth + 1, budget) for index, child in enumerate(filters)
    )
    return AllOf(children) if kind == "all" else AnyOf(children)


def _field_test(message: memory_pb2.FieldFilter, field: str, budget: _Budget) -> FieldTest:
    name, path = parse_field(message.field, f"{field}.field")
    kind = message.WhichOneof("test")
    if kind is None:
        raise InvalidArgument.of(field, "sets no test: one of equals, in, contains, range or exists")
    test = Test(kind)
    at = f"{field}.{kind}"
    if test is Test.EXISTS:
        if name in ("create_time", "update_time"):
            raise InvalidArgument.of(at, f"{name} always exists")
        return FieldTest(name, path, test, message.exists)
    if test is Test.RANGE:
        return FieldTest(name, path, test, _bounds(message.range, at, name))
    if name != METADATA:
        raise InvalidArgument.of(at, f"{name} is a time: compare it with a range")
    if test is Test.IN:
        values = getattr(message, "in").values
        if not 1 <= len(values) <= MAX_IN_VALUES:
            raise InvalidArgument.of(at, f"must hold 1 to {MAX_IN_VALUES} values, got {len(values)}")
        budget.values += len(values)
        if budget.values > MAX_FILTER_VALUES:
            raise InvalidArgument.of(
                at, f"is past the limit of {MAX_FILTER_VALUES} values in all of a filter's membership tests"
            )
        return FieldTest(name, path, test, tuple(_scalar(v, f"{at}.values[{i}]", False) for i, v in enumerate(values)))
    value = message.equals if test is Test.EQUALS else message.contains
    return FieldTest(name, path, test, _scalar(value, at, test is Test.EQUALS))


def parse_field(text: str, field: str) -> tuple[str, tuple[str, ...]]:
    """A field name: one of `TIME_FIELDS`, or `metadata.` and its keys, dotted; a key holding a dot or a
    backtick is quoted in backticks, a backtick in it doubled."""
    if text in TIME_FIELDS:
        return text, ()
    prefix = METADATA + "."
    if not text.startswith(prefix):
        raise InvalidArgument.of(field, f"must be {', '.join(TIME_FIELDS)} or metadata.KEY, got {text[:80]!r}")
    keys: list[str] = []
    rest = text[len(prefix) :]
    while True:
        if rest.startswith("`"):
            parts, position = [], 1
            while True:
                end = rest.find("`", position)
                if end < 0:
                    raise InvalidArgument.of(field, f"opens a quoted key it does not close: {text[:80]!r}")
                parts.append(rest[position:end])
                if rest[end + 1 : end + 2] != "`":
                    break
                parts.append("`")
                position = end + 2
            keys.append("".join(parts))
            rest = rest[end + 1 :]
            if rest and not rest.startswith("."):
                raise InvalidArgument.of(field, f"must follow a quoted key with a dot or end: {text[:80]!r}")
        else:
            end = rest.find(".")
            keys.append(rest if end < 0 else rest[:end])
            rest = "" if end < 0 else rest[end:]
            if not keys[-1]:
                raise InvalidArgument.of(field, f"holds an empty key: {text[:80]!r}")
        if not rest:
            break
        rest = rest[1:]
        if not rest:
            raise InvalidArgument.of(field, f"ends with a dot: {text[:80]!r}")
    for key in keys:
        check_text(key, field, MAX_FILTER_TEXT, multiline=False)
    return METADATA, tuple(keys)


def _scalar(value: struct_pb2.Value, field: str, null_allowed: bool) -> Any:
    kind = value.WhichOneof("kind")
    if kind == "string_value":
        return check_text(value.string_value, field, MAX_FILTER_TEXT)
    if kind == "number_value":
        if not math.isfinite(value.number_value):
            raise InvalidArgument.of(field, f"must be a finite number, got {value.number_value}")
        return value.number_value
    if kind == "bool_value":
        return value.bool_value
    if kind == "null_value" and null_allowed:
        return None
    allowed = "a string, number, bool" + (" or null" if null_allowed else "")
    raise InvalidArgument.of(field, f"must be {allowed}" + ("" if kind else ", and is not set"))


def _bounds(message: memory_pb2.Range, field: str, name: str) -> tuple[tuple[str, Any], ...]:
    """The range's bounds: at least one, at most one lower and one upper, of the field's kind."""
    bounds: list[tuple[str, Any]] = []
    for bound in BOUNDS:
        if not message.HasField(bound):
            continue
        at = f"{field}.{bound}"
        value = getattr(message, bound)
        kind = value.WhichOneof("value")
        if kind is None:
            raise InvalidArgument.of(at, "sets no value: a number or a time")
        if name == METADATA:
            if kind != "number":
                raise InvalidArgument.of(at, "metadata is compared with numbers, not times")
            if not math.isfinite(value.number):
                raise InvalidArgument.of(at, f"must be a finite number, got {value.number}")
            bounds.append((bound, value.number))
        else:
            if kind != "time":
                raise InvalidArgument.of(at, f"{name} is compared with times, not numbers")
            try:
                bounds.append((bound, value.time.ToDatetime(tzinfo=UTC)))
            except (ValueError, OverflowError) as error:
                raise InvalidArgument.of(f"{at}.time", f"is not a time: {error}") from None
    if not bounds:
        raise InvalidArgument.of(field, "sets no bound: at least one of gt, gte, lt, lte")
    lower = [bound for bound, _ in bounds if bound.startswith("g")]
    upper = [bound for bound, _ in bounds if bound.startswith("l")]
    if len(lower) > 1 or len(upper) > 1:
        raise InvalidArgument.of(field, f"sets {' and '.join(lower if len(lower) > 1 else upper)}: one of them at most")
    return tuple(bounds)
