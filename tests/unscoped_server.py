"""The contextfold server with its code-level tenant scoping taken out, for the tenancy suite.

Every SQL statement the server sends has its namespace predicates rewritten to
always hold (`namespace = %s` becomes `%s IS NOT NULL`, keeping the parameters),
so what the suite still finds isolated is isolated by Postgres row-level security
alone. Run as `python -m tests.unscoped_server <serve options>`.
"""

from __future__ import annotations

import re
import sys

import psycopg
from psycopg import sql

_PREDICATE = re.compile(r"\b(?:\w+\.)?namespace\s*=\s*(%\(namespace\)s|%s|\w+\.namespace)\b")
_execute = psycopg.AsyncCursor.execute
_announced = False


def _unscoped(match: re.Match[str]) -> str:
    value = match.group(1)
    return "TRUE" if value.endswith(".namespace") else f"({value}::text IS NOT NULL)"


async def execute(self, query, params=None, **kwargs):
    global _announced
    text = query.as_string(self) if isinstance(query, sql.Composable) else query
    if isinstance(text, str):
        text, count = _PREDICATE.subn(_unscoped, text)
        if count and not _announced:
            _announced = True
            print(f"unscoped: namespace predicates stripped, e.g. {text[:200]!r}", file=sys.stderr, flush=True)
        query = text
    return await _execute(self, query, params, **kwargs)


psycopg.AsyncCursor.execute = execute  # type: ignore[method-assign]

if __name__ == "__main__":
    from contextfold_server.supervisor import main

    main(sys.argv[1:])
