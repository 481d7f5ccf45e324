"""`contextfold tenants`: set and show each namespace's quotas, and what it holds, in the service's Postgres.

An operator's tool (`operator_commands.py`); servers hear of a new quota within moments. A limit
set to `default` goes back to the server's default.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable

from .access.quotas import LIMITS, QuotaRepository
from .operator_commands import add_database_options, run_on_database

_KINDS = {"requests_per_second": float, "writes_per_second": float}


def _limit(kind: Callable[[str], object]) -> Callable[[str], object]:
    def parse(text: str) -> object:
        return None if text == "default" else kind(text)

    return parse


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="contextfold tenants", description=__doc__.split("\n\n")[0])
    add_database_options(parser)
    actions = parser.add_subparsers(dest="action", required=True)
    setting = actions.add_parser("set-quota", help="set a namespace's limits (the others are kept)")
    setting.add_argument("namespace")
    for name in LIMITS:
        setting.add_argument(
            f"--{name.replace('_', '-')}", dest=name, type=_limit(_KINDS.get(name, int)), default=argparse.SUPPRESS
        )
    show = actions.add_parser("show", help="a namespace's quota (the server's defaults where it sets none) and usage")
    show.add_argument("namespace")
    return parser


async def run(args: argparse.Namespace, database_url: str) -> int:
    quotas = QuotaRepository(database_url)
    if args.action == "set-quota":
        limits = {name: getattr(args, name) for name in LIMITS if hasattr(args, name)}
        try:
            await quotas.set(args.namespace, limits)
        except ValueError as error:
            print(f"error: {error}", file=sys.stderr)
            return 1
    print(json.dumps(await quotas.show(args.namespace), indent=2))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_on_database(args, lambda url: run(args, url))
