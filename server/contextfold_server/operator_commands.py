"""What the operator's commands (`contextfold keys`, `contextfold tenants`) share: they act directly on
the service's Postgres as its schema owner (`--database-url`, which defaults to the server's
migration URL, else its database URL; or the embedded Postgres in `--data-dir`, the running
server's or, with none running, one of the command's own), migrated first, so they work before any
key exists. Servers hear of every change within moments (NOTIFY)."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import psycopg

from .postgres.conninfo import data_dir_problem
from .postgres.embedded import DataDirInUse, EmbeddedPostgres, default_data_dir, running_url
from .postgres.migrations import migrate


def add_database_options(parser: argparse.ArgumentParser) -> None:
    env = os.environ.get
    # The schema owner's URL first: with two roles, the requests' one may not read or write the keys.
    parser.add_argument(
        "--database-url",
        default=env("CONTEXTFOLD_DATABASE_MIGRATION_URL") or env("CONTEXTFOLD_DATABASE_URL", ""),
        help="the service's Postgres, as the schema owner ($CONTEXTFOLD_DATABASE_MIGRATION_URL when set, as"
        " `contextfold serve` takes it, else $CONTEXTFOLD_DATABASE_URL; neither: the embedded Postgres)",
    )
    parser.add_argument("--data-dir", type=Path, default=Path(env("CONTEXTFOLD_DATA_DIR", str(default_data_dir()))))


def run_on_database(args: argparse.Namespace, run: Callable[[str], Awaitable[int]]) -> int:
    """`run(url)` on the database the options name, migrated first; its exit code."""

    async def migrated(url: str) -> int:
        try:
            await migrate(url)
            return await run(url)
        except psycopg.errors.InsufficientPrivilege as error:
            print(
                f"error: the database refused: {error}; the operator's commands act as the schema owner: give"
                " its URL (--database-url, or CONTEXTFOLD_DATABASE_MIGRATION_URL)",
                file=sys.stderr,
            )
            return 1
        except psycopg.OperationalError as error:
            print(f"error: the database is out of reach: {error}", file=sys.stderr)
            return 1

    if args.database_url:
        return asyncio.run(migrated(args.database_url))
    if problem := data_dir_problem(args.data_dir):
        print(f"error: {problem}", file=sys.stderr)
        return 2
    # The embedded Postgres: the running server's, or with none running, one of the command's own
    # (started on this thread, which outlives it: Postgres is told to stop when that thread ends).
    joined = running_url(args.data_dir)
    if joined is not None:
        return asyncio.run(migrated(joined))
    embedded = EmbeddedPostgres(args.data_dir)
    try:
        return asyncio.run(migrated(embedded.start()))
    except DataDirInUse as error:
        print(f"error: {error}, which is starting or stopping: try again in a moment", file=sys.stderr)
        return 1
    finally:
        embedded.stop()
