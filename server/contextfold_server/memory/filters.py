"""Filters (engine/filters.py) compiled to a parameterized SQL condition over the entries' row, `m`.

The statement's text depends only on the filter's shape: every value a caller
chose (keys, strings, numbers, times) travels as a parameter. Equality and list
membership are containment (`@>`), which the metadata's inverted index serves;
membership (`in`), ranges and existence read the value by its keys (`->` with a
text key, which never indexes into a list, as containment does not), once per row.
Every condition is wrapped so that it is never NULL, so `NOT` is the complement.

Under row-level security, which every request runs with, Postgres uses no index for `@>`: where a
filter is read exactly, its `anchor` narrows the rows read to the holders the index finds.
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from typing import Any

from psycopg.types.json import Jsonb

from ..engine.filters import METADATA, AllOf, AnyOf, FieldTest, Filter, Not, Test

_TIME_COLUMNS = {
    "create_time": "m.create_time",
    "update_time": "coalesce(m.update_time, m.create_time)",
    "expire_time": "m.expire_time",
}
_COMPARISONS = {"gt": ">", "gte": ">=", "lt": "<", "lte": "<="}

Param = Callable[..., str]


def compile_filter(tree: Filter | None, prefix: str = "filter") -> tuple[str, dict[str, Any]]:
    """` AND (condition)` over the row `m`, and its parameters (named `prefix_0`, …); empty for no filter."""
    if tree is None:
        return "", {}
    params: dict[str, Any] = {}

    def param(value: Any, cast: str = "") -> str:
        name = f"{prefix}_{len(params)}"
        params[name] = value
        return f"%({name})s{cast}"

    def walk(node: Filter) -> str:
        if isinstance(node, AllOf):
            return "(" + " AND ".join(walk(child) for child in node.filters) + ")"
        if isinstance(node, AnyOf):
            return "(" + " OR ".join(walk(child) for child in node.filters) + ")"
        if isinstance(node, Not):
            return f"(NOT {walk(node.filter)})"
        return _metadata_test(node, param) if node.field == METADATA else _time_test(node, param)

    return f" AND {walk(tree)}", params


def anchor(tree: Filter | None) -> list[Jsonb] | None:
    """Documents one of which every matching entry's metadata contains, when the filter says so at its
    top (an equality, membership or list membership, alone or among an `all`): the inverted index finds
    their holders (`metadata_holders`), among which the whole filter is then checked. None otherwise."""
    nodes = tree.filters if isinstance(tree, AllOf) else (tree,) if tree is not None else ()
    for node in nodes:
        if isinstance(node, FieldTest) and node.field == METADATA:
            if node.test is Test.EQUALS:
                return [Jsonb(_nested(node.path, node.value))]
            if node.test is Test.IN:
                return [Jsonb(_nested(node.path, value)) for value in node.value]
            if node.test is Test.CONTAINS:
                return [Jsonb(_nested(node.path, [node.value]))]
    return None


def _metadata_test(node: FieldTest, param: Param) -> str:
    if node.test is Test.EQUALS:
        return f"(m.metadata @> {param(Jsonb(_nested(node.path, node.value)))})"
    if node.test is Test.IN:
        # The value read once per row, then compared with each (containment per value would read the
        # whole metadata again for each): the same entries, as a scalar contains only itself.
        value = "m.metadata" + "".join(f" -> {param(key, '::text')}" for key in node.path)
        return f"coalesce(({value}) = ANY({param([Jsonb(v) for v in node.value], '::jsonb[]')}), false)"
    if node.test is Test.CONTAINS:
        return f"(m.metadata @> {param(Jsonb(_nested(node.path, [node.value])))})"
    value = "m.metadata" + "".join(f" -> {param(key, '::text')}" for key in node.path)
    if node.test is Test.EXISTS:
        return f"(({value}) IS {'NOT ' if node.value else ''}NULL)"
    number = f"(CASE WHEN jsonb_typeof({value}) = 'number' THEN ({value})::numeric END)"
    # The bound as the decimal its JSON says, as metadata keeps numbers: a float cast to numeric would
    # keep 15 digits, and `gte 1733040000123456` miss the entry holding exactly that.
    comparisons = " AND ".join(
        f"{number} {_COMPARISONS[bound]} {param(Decimal(repr(limit)), '::numeric')}" for bound, limit in node.value
    )
    return f"coalesce({comparisons}, false)"


def _time_test(node: FieldTest, param: Param) -> str:
    column = _TIME_COLUMNS[node.field]
    if node.test is Test.EXISTS:
        return f"({column} IS {'NOT ' if node.value else ''}NULL)"
    comparisons = " AND ".join(
        f"{column} {_COMPARISONS[bound]} {param(limit, '::timestamptz')}" for bound, limit in node.value
    )
    return f"coalesce({comparisons}, false)"


def _nested(path: tuple[str, ...], value: Any) -> Any:
    """`{"a": {"b": value}}` for the path ("a", "b")."""
    for key in reversed(path):
        value = {key: value}
    return value
