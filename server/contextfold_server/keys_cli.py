"""`contextfold keys`: create, list and revoke API keys, directly in the service's Postgres.

An operator's tool (`operator_commands.py`): it works before any key exists, and servers hear of
every change within moments.
"""

from __future__ import annotations

import argparse
import json
import sys

from .access.keys import ROLES, KeyRepository
from .operator_commands import add_database_options, run_on_database


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="contextfold keys", description=__doc__.split("\n\n")[0])
    add_database_options(parser)
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
    return run_on_database(args, lambda url: run(args, url))
