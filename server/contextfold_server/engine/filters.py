"""Filters on entries: conditions on one field (`FieldTest`) combined by `AllOf`, `AnyOf` and `Not`.

The fields are the entry's times (`TIME_FIELDS`) and the values of its metadata,
each reached by a path of keys. Every condition is true or false for every entry,
never unknown: an entry without the key does not hold `rating >= 3`, so it holds
`not (rating >= 3)`. `memory/filters.py` compiles a filter to SQL.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

# The entry's times a filter may name; `update_time` is the creation time until an update.
TIME_FIELDS = ("create_time", "update_time", "expire_time")
METADATA = "metadata"


class Test(Enum):
    EQUALS = "equals"
    IN = "in"
    CONTAINS = "contains"
    RANGE = "range"
    EXISTS = "exists"


# A range's bounds by name: greater than, at least, less than, at most.
BOUNDS = ("gt", "gte", "lt", "lte")


@dataclass(frozen=True)
class FieldTest:
    """A condition on one field: a time (`TIME_FIELDS`), or (`METADATA`) the metadata value at `path`."""

    field: str
    path: tuple[str, ...]
    test: Test
    # EQUALS, CONTAINS: a string, number, bool or None; IN: a tuple of those; RANGE: ((bound, number or
    # datetime), …); EXISTS: whether the field is present.
    value: Any


@dataclass(frozen=True)
class AllOf:
    filters: tuple[Filter, ...]


@dataclass(frozen=True)
class AnyOf:
    filters: tuple[Filter, ...]


@dataclass(frozen=True)
class Not:
    filter: Filter


Filter = FieldTest | AllOf | AnyOf | Not
