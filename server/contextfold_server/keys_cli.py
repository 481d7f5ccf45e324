"""`contextfold keys`: create, list and revoke API keys, directly in the service's Postgres.

An operator's tool: it connects to the database the servers use (`--database-url`,
or the embedded Postgres in `--data-dir`), so it works before any key exists.
Servers hear of every change within moments.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path

from .access.keys import ROLES, KeyRepository
from .postgres.embedded import DataDirInUse, EmbeddedPostgres, default_data_dir, running_url
from .postgres.migrations import migrate


def build_parser() -> argparse.ArgumentParser:
    env = os.environ.get
    parser = argparse.ArgumentParser(prog="contextfold keys", description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", default=env("CONTEXTFOLD_DATABASE_URL", ""))
    parser.add_argument("--data-dir", type=Path, default=Path(env("CONTEXTFOLD_DATA_DIR", str(default_data_dir()))))
    actions = parser.add_subparsers(dest="action", required=True)
    create = actions.add_parser("create", help="make a key; it is printed once and never stored")
    create.add_argument("--namespace", required=True, help="the tenant the key acts for")
    create.add_argument(
        "--role", choices=ROLES, required=True, help="agent: inject and memories; admin: also stores and providers"
    )
    create.add_argument("--description", default="")
    create.add_argument("--user-id", default="", help="bind the key to this user: every call is confined to it")
    create.add_argument("--agent-id", default="", help="bind the key to this agent: every call is confined to it")
    actions.add_parser("list", help="every key, revoked ones included (never the keys themselves)")
    revoke = actions.add_parser("revoke", help="revoke a key by its id")
    revoke.add_argument("id")
    return parser


async def run(args: argparse.Namespace, database_url: str) -> int:
    await migrate(database_url)
    keys = KeyRepository(database_url)
    if args.action == "create":
        try:
            record, key = await keys.create(args.namespace, args.role, args.description, args.user_id, args.agent_id)
        except ValueError as error:
            print(f"error: {error}", file=sys.stderr)
            return 1
        print(json.dumps({**record.as_dict(), "key": key}, indent=2))
        print("The key is shown only now; keep it in a secret store.", file=sys.stderr)
    elif args.action == "list":
        print(json.dumps([record.as_dict() for record in await keys.list()], indent=2))
    elif not await keys.revoke(args.id):
        print(f"error: no active key has id {args.id!r}", file=sys.stderr)
        return 1
    else:
        print(json.dumps({"revoked": args.id}))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.database_url:
        return asyncio.run(run(args, args.database_url))
    # The embedded Postgres: the running server's, or with none running, one of the command's own
    # (started on this thread, which outlives it: Postgres is told to stop when that thread ends).
    joined = running_url(args.data_dir)
    if joined is not None:
        return asyncio.run(run(args, joined))
    embedded = EmbeddedPostgres(args.data_dir)
    try:
        return asyncio.run(run(args, embedded.start()))
    except DataDirInUse as error:
        print(f"error: {error}, which is starting or stopping: try again in a moment", file=sys.stderr)
        return 1
    finally:
        embedded.stop()
