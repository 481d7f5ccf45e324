"""The `contextfold` command: run the server, manage stores and memories, and inject.

Every command but `serve` and `keys` talks to a running server (`--address`, or
CONTEXTFOLD_ADDRESS; `--api-key`, or CONTEXTFOLD_API_KEY). Results print as JSON
on stdout; errors print on stderr with the status and each bad field, and exit 1.
`serve` and `keys` (API keys, kept in the service's database) come with the server.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime
from importlib.metadata import entry_points
from typing import Any, Literal, TextIO

from google.protobuf import json_format
from google.protobuf.message import Message

from ._requests import RANKINGS, filter_times
from .client import Client, default_target
from .convert import dumps, loads, message_dict
from .errors import ContextfoldError, InvalidApiKey
from .keys import checked_key
from .v1 import memory_pb2

# Entries per import request: well under a request's size limit at 384 dimensions.
IMPORT_BATCH = 200


def _print_json(value: Any) -> None:
    print(json.dumps(loads(dumps(value)), indent=2, ensure_ascii=False))


def _proto_json(message: Message) -> dict[str, Any]:
    return message_dict(message)


def _scope(args: argparse.Namespace) -> dict[str, str] | None:
    scope = {key: getattr(args, key) for key in ("user_id", "agent_id", "session_id") if getattr(args, key)}
    return scope or None


def _add_scope_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--user-id", default="")
    parser.add_argument("--agent-id", default="")
    parser.add_argument("--session-id", default="")


# Commands that come with the server, which registers them in this entry-point group: the client
# names them for `--help`, and never imports the server itself.
SERVER_COMMANDS = "contextfold.commands"
_SERVER_COMMAND_HELP = {
    "serve": "run the server (options: contextfold serve --help)",
    "keys": "create, list and revoke API keys (contextfold keys --help)",
    "tenants": "set and show each namespace's quotas and usage (contextfold tenants --help)",
}


def _server_command(command: str, rest: Sequence[str]) -> int:
    found = {entry.name: entry for entry in entry_points(group=SERVER_COMMANDS)}
    if command not in found:
        print(
            f"error: `contextfold {command}` comes with the server, which is not installed here:"
            " pip install contextfold-server (in a checkout, `make run` installs it)",
            file=sys.stderr,
        )
        return 1
    return found[command].load()(list(rest)) or 0


def _mcp(args: argparse.Namespace, rest: Sequence[str]) -> int:
    """`contextfold mcp`, which needs the MCP SDK (the `mcp` extra): the client alone does not."""
    try:
        from . import mcp_server
    except ImportError as missing:
        print(
            f"error: `contextfold mcp` needs the MCP SDK ({missing.name} is missing):"
            " pip install 'contextfold[mcp]' (in a checkout: pip install './client/python[mcp]')",
            file=sys.stderr,
        )
        return 1
    parser = argparse.ArgumentParser(prog="contextfold mcp", description=mcp_server.__doc__.split("\n\n")[0])
    mcp_server.add_options(parser)
    return mcp_server.run(args, parser.parse_args(rest))


def _stores(args: argparse.Namespace, cf: Client) -> None:
    if args.action == "create":
        _print_json(_proto_json(cf.create_store(args.name, description=args.description, dimension=args.dimension)))
    elif args.action == "list":
        _print_json([_proto_json(store) for store in cf.list_stores()])
    else:
        _print_json({"deleted_memory_count": cf.delete_store(args.name, force=args.force)})


def _memory(args: argparse.Namespace, cf: Client) -> None:
    if args.action == "add":
        if args.id and len(args.content) > 1:
            raise SystemExit("error: --id names one entry; give one content with it")
        entry: dict[str, Any] = {key: value for key, value in (_scope(args) or {}).items()}
        if args.metadata:
            entry["metadata"] = json.loads(args.metadata)
        if args.id:
            entry["id"] = args.id
        added = cf.add_memories(args.store, [{**entry, "content": content} for content in args.content])
        _print_json([_proto_json(memory) for memory in added])
    elif args.action == "search":
        results = cf.search_memories(
            args.query,
            scope=_scope(args),
            stores=args.store,
            max_results=args.max_results,
            ranking=args.ranking,
            min_score=args.min_score,
            filter=_filter(args),
            asked_time=args.asked_time,
        )
        _print_json([_proto_json(result) for result in results])
    elif args.action == "list":
        listed = cf.list_memories(args.store, scope=_scope(args), filter=_filter(args))
        _print_json([_proto_json(memory) for memory in listed])
    elif args.action == "get":
        _print_json(_proto_json(cf.get_memory(args.id)))
    elif args.action == "update":
        updated = cf.update_memory(
            args.id,
            content=args.content,
            metadata=json.loads(args.metadata) if args.metadata else None,
            expire_time=args.expire_time,
            etag=args.etag,
        )
        _print_json(_proto_json(updated.memory))
    elif args.action == "versions":
        _print_json([_proto_json(version) for version in cf.list_memory_versions(args.id)])
    elif args.action == "erase":
        erased = cf.erase_memories(
            scope=_scope(args), filter=_filter(args), stores=args.store, validate_only=args.validate_only
        )
        _print_json({"would_erase_count" if args.validate_only else "erased_count": erased})
    elif args.action == "export":
        _export(args, cf)
    elif args.action == "import":
        _import(args, cf)
    else:
        deleted = cf.delete_memories(args.ids, allow_missing=args.allow_missing, etag=args.etag)
        _print_json({"deleted_count": deleted})


def _filter(args: argparse.Namespace) -> dict[str, Any] | None:
    """`--filter`: a JSON object, as the Python client's `filter` reads (docs/lifecycle.md, "Filter by
    metadata and time")."""
    if not args.filter:
        return None
    value = json.loads(args.filter)
    if not isinstance(value, dict):
        raise SystemExit("error: --filter takes a JSON object")
    return filter_times(value)


def _iso_time(value: str) -> datetime:
    """An option's ISO 8601 time (one without an offset is UTC, as the client takes it); a usage error naming the
    value otherwise."""
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 time: {value!r}") from None


def _expire_time(value: str) -> datetime | Literal["never"]:
    return "never" if value == "never" else _iso_time(value)


class Progress:
    """A progress line on stderr when it is a terminal (nothing otherwise): a bar when the total is
    known, a count when it is not."""

    def __init__(self, what: str, total: int | None, stream: Any = None) -> None:
        self.what = what
        self.total = total
        self.done = 0
        self.stream = stream or sys.stderr
        self.shown = self.stream.isatty()

    def advance(self, count: int) -> None:
        self.done += count
        if not self.shown:
            return
        if self.total:
            filled = min(30, 30 * self.done // self.total)
            line = f"[{'#' * filled}{'.' * (30 - filled)}] {self.done}/{self.total} {self.what}"
        else:
            line = f"{self.done} {self.what}"
        self.stream.write("\r" + line)
        self.stream.flush()

    def finish(self) -> None:
        if self.shown:
            self.stream.write("\n")
            self.stream.flush()


def _json_line(key: str, message: Message) -> str:
    return json.dumps({key: _proto_json(message)}, ensure_ascii=False, separators=(",", ":"))


def _export(args: argparse.Namespace, cf: Client) -> None:
    """JSON Lines: one `{"store": …}` per store first, then one `{"memory": …}` per entry, vector included."""
    out = sys.stdout if args.output == "-" else open(args.output, "w", encoding="utf-8")  # noqa: SIM115
    scope, tree = _scope(args), _filter(args)
    progress: Progress | None = None
    with out:
        for part in cf.export_memories(stores=args.store, scope=scope, filter=tree, timeout=args.export_timeout):
            for store in part.stores:
                out.write(_json_line("store", store) + "\n")
            if progress is None:
                # The stores' counts are the total when nothing narrows the export.
                total = None if scope or tree else sum(store.memory_count for store in part.stores)
                progress = Progress("entries exported", total)
            for memory in part.memories:
                out.write(_json_line("memory", memory) + "\n")
            progress.advance(len(part.memories))
    if progress is not None:
        progress.finish()
        print(f"exported {progress.done} entries", file=sys.stderr)


def _import_parts(lines: Iterable[str], progress: Progress) -> Iterator[memory_pb2.ImportMemoriesRequest]:
    part = memory_pb2.ImportMemoriesRequest()
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
            if "store" in item:
                part.stores.append(json_format.ParseDict(item["store"], memory_pb2.Store()))
            else:
                part.memories.append(json_format.ParseDict(item["memory"], memory_pb2.Memory()))
        except (ValueError, KeyError, TypeError, json_format.ParseError) as error:
            raise SystemExit(f"error: line {number}: not an exported store or entry ({error})") from None
        if len(part.memories) >= IMPORT_BATCH:
            progress.advance(len(part.memories))
            yield part
            part = memory_pb2.ImportMemoriesRequest()
    if part.stores or part.memories:
        progress.advance(len(part.memories))
        yield part


def _import(args: argparse.Namespace, cf: Client) -> None:
    lines: TextIO
    if args.input == "-":
        lines, total = sys.stdin, None
    else:
        with open(args.input, encoding="utf-8") as counted:
            total = sum(1 for line in counted if line.startswith('{"memory"'))
        lines = open(args.input, encoding="utf-8")  # noqa: SIM115
    progress = Progress("entries imported", total)
    with lines:
        result = cf.import_memories(_import_parts(lines, progress), timeout=args.export_timeout)
    progress.finish()
    _print_json(_proto_json(result))


def _providers(args: argparse.Namespace, cf: Client) -> None:
    settings = {
        key: getattr(args, key)
        for key in ("target", "trigger", "trigger_expression", "priority", "timeout", "max_tokens", "enabled")
        if getattr(args, key, None) is not None
    }
    if args.action == "register":
        target = settings.pop("target")
        _print_json(_proto_json(cf.register_provider(args.name, target, **settings)))
    elif args.action == "update":
        _print_json(_proto_json(cf.update_provider(args.name, **settings)))
    elif args.action == "list":
        _print_json([_proto_json(provider) for provider in cf.list_providers()])
    elif args.action == "get":
        _print_json(_proto_json(cf.get_provider(args.name)))
    else:
        cf.delete_provider(args.name)
        _print_json({"deleted": args.name})


RANKING_HELP = "how entries are ranked (default: the server's, store_aware unless its operator chose another)"
ASKED_TIME_HELP = "when the question is asked, ISO 8601 (a conversation replayed): its 'yesterday' is the day before"


def _text_or_file(value: str) -> str:
    """`@path` stands for the file's text, as templates are easier to keep in files."""
    if value.startswith("@"):
        with open(value[1:], encoding="utf-8") as source:
            return source.read()
    return value


def _inject(args: argparse.Namespace, cf: Client) -> None:
    source = sys.stdin if args.file == "-" else open(args.file, encoding="utf-8")  # noqa: SIM115
    with source:
        document = loads(source.read())
    messages = document["messages"] if isinstance(document, dict) else document
    options: dict[str, Any] = {
        "trigger": args.trigger,
        "trigger_expression": args.trigger_expression,
        "stores": args.store,
        "query": args.query,
        "query_expression": args.query_expression,
        "format": args.format,
        "format_template": _text_or_file(args.format_template),
        "ranking": args.ranking,
        "providers": args.provider,
        "max_tokens": args.max_tokens,
        "coalesce": args.coalesce,
    }
    if args.max_entries is not None:
        options["max_entries"] = args.max_entries
    if args.min_score is not None:
        options["min_score"] = args.min_score
    if args.asked_time is not None:
        options["asked_time"] = args.asked_time
    result = cf.inject(messages, scope=_scope(args), **options)
    _print_json(result.messages)
    report = result.report
    summary = (
        f"injected {len(report.entries)} entries into message {report.target_message_index}"
        if report.injected
        else f"no memory injected: {report.detail}"
    )
    print(f"{summary} (query: {report.query!r})", file=sys.stderr)
    for source in report.sources[1:]:
        outcome = f"{source.tokens} tokens" if source.injected else f"left out: {source.detail}"
        print(f"provider {source.source}: {outcome}", file=sys.stderr)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="contextfold", description=__doc__.split("\n\n")[0])
    parser.add_argument("--address", default=default_target(), help="default: $CONTEXTFOLD_ADDRESS or localhost:50051")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds per call")
    parser.add_argument("--api-key", default=None, help="default: $CONTEXTFOLD_API_KEY")
    commands = parser.add_subparsers(dest="command", required=True)

    for name, help_text in _SERVER_COMMAND_HELP.items():
        commands.add_parser(name, help=help_text, add_help=False)

    stores = commands.add_parser("stores", help="create, list and delete stores")
    store_actions = stores.add_subparsers(dest="action", required=True)
    create = store_actions.add_parser("create", help="create a store (its dimension: the embedder's unless given)")
    create.add_argument("name")
    create.add_argument("--description", default="")
    create.add_argument("--dimension", type=int, default=0, help="0: the server embedder's dimension")
    store_actions.add_parser("list", help="list the stores this key can see")
    delete = store_actions.add_parser("delete", help="delete a store (one holding entries only with --force)")
    delete.add_argument("name")
    delete.add_argument("--force", action="store_true", help="also delete the store's entries")

    memory = commands.add_parser(
        "memory", help="add, search, list, get, update, delete, erase, export and import entries"
    )
    memory_actions = memory.add_subparsers(dest="action", required=True)
    add = memory_actions.add_parser("add", help="add entries to a store, one per argument (embedded by the server)")
    add.add_argument("--store", required=True)
    add.add_argument("content", nargs="+", help="one entry per argument")
    add.add_argument("--id", default="", help="a caller-chosen id, so a retried add is harmless")
    add.add_argument("--metadata", default="", help="a JSON object kept with the entry")
    _add_scope_options(add)
    search = memory_actions.add_parser("search", help="the entries nearest to a query, best first, with their scores")
    search.add_argument("query")
    search.add_argument("--store", action="append", default=[], help="repeat for several; default: all")
    search.add_argument("--max-results", type=int, default=5)
    search.add_argument("--min-score", type=float)
    search.add_argument("--ranking", choices=list(RANKINGS), help=RANKING_HELP)
    search.add_argument("--asked-time", type=_iso_time, help=ASKED_TIME_HELP)
    _add_scope_options(search)
    listing = memory_actions.add_parser("list", help="every entry of a store, oldest first (within a scope and filter)")
    listing.add_argument("--store", required=True)
    _add_scope_options(listing)
    get = memory_actions.add_parser("get", help="one entry by id, with its etag")
    get.add_argument("id")
    remove = memory_actions.add_parser("delete", help="delete entries by id, all or none")
    remove.add_argument("ids", nargs="+")
    remove.add_argument("--allow-missing", action="store_true")
    remove.add_argument("--etag", default="", help="delete only this version (one id, from get); ABORTED if it changed")
    update = memory_actions.add_parser("update", help="change an entry's content, metadata or expiry")
    update.add_argument("id")
    update.add_argument("--content", help="new text (embedded again)")
    update.add_argument("--metadata", default="", help="a JSON object replacing the entry's metadata")
    update.add_argument("--expire-time", type=_expire_time, help="ISO 8601 time it expires, or never")
    update.add_argument("--etag", default="", help="update only this version (from get); ABORTED if it changed")
    memory_actions.add_parser("versions", help="the versions updates replaced, newest first").add_argument("id")
    erase = memory_actions.add_parser("erase", help="delete every entry of a scope and/or filter, in every store")
    erase.add_argument("--store", action="append", default=[], help="repeat for several; default: all")
    erase.add_argument("--validate-only", action="store_true", help="count what would be erased; erase nothing")
    _add_scope_options(erase)
    export = memory_actions.add_parser("export", help="write stores and entries (with vectors) as JSON Lines")
    export.add_argument("--store", action="append", default=[], help="repeat for several; default: all")
    export.add_argument("--output", "-o", default="-", help="a file; - (the default) for stdout")
    _add_scope_options(export)
    load = memory_actions.add_parser("import", help="read what export wrote; entries are idempotent by id")
    load.add_argument("input", help="a JSON Lines file from export; - for stdin")
    for streamed in (export, load):
        streamed.add_argument(
            "--export-timeout", type=float, default=None, help="seconds for the whole transfer (default: none)"
        )
    for filtered in (search, listing, erase, export):
        filtered.add_argument(
            "--filter",
            default="",
            help='a JSON object: {"topic": "food", "rating": {"gte": 3}} (docs/lifecycle.md: filters)',
        )

    providers = commands.add_parser("providers", help="register, list, update and delete context providers")
    provider_actions = providers.add_subparsers(dest="action", required=True)
    for action in ("register", "update"):
        said = "register a context provider Inject asks" if action == "register" else "change a provider's settings"
        change = provider_actions.add_parser(action, help=said)
        change.add_argument("name")
        change.add_argument("--target", required=action == "register", help="host:port the service dials")
        change.add_argument("--trigger", choices=["user_turn", "every_turn"])
        change.add_argument("--trigger-expression", help="a CEL bool expression, instead of --trigger")
        change.add_argument("--priority", type=int, help="higher comes first and is cut last")
        change.add_argument("--timeout", type=float, help="seconds to wait for it (default 1)")
        change.add_argument("--max-tokens", type=int, help="its own token cap; 0 for none")
        change.add_argument("--enabled", type=lambda v: v.lower() in ("1", "true", "yes"), metavar="true|false")
    provider_actions.add_parser("list", help="list the registered providers")
    for action in ("get", "delete"):
        said = "show a provider's registration" if action == "get" else "delete a provider's registration"
        provider_actions.add_parser(action, help=said).add_argument("name")

    inject = commands.add_parser("inject", help="fold memory and provider context into a conversation and print it")
    inject.add_argument("--file", required=True, help="a JSON list of messages (or {'messages': [...]}); - for stdin")
    inject.add_argument("--trigger", choices=["user_turn", "every_turn"], help="default: user_turn")
    inject.add_argument("--trigger-expression", default="", help="a CEL bool expression, instead of --trigger")
    inject.add_argument("--store", action="append", default=[], help="repeat for several; default: all")
    inject.add_argument("--max-entries", type=int, help="memory entries at most (default 5)")
    inject.add_argument("--min-score", type=float)
    inject.add_argument("--ranking", choices=list(RANKINGS), help=RANKING_HELP)
    inject.add_argument("--query", default="", help="search for this instead of the adaptive query")
    inject.add_argument("--query-expression", default="", help="a CEL string expression deriving the query")
    inject.add_argument("--format", choices=["xml", "bullets", "markdown"], help="default: xml")
    inject.add_argument("--format-template", default="", help="a Jinja2 template for the entries, or @file")
    inject.add_argument("--provider", action="append", default=[], help="ask only these providers; default: all")
    inject.add_argument("--max-tokens", type=int, default=0, help="cap on tokens injected in all")
    inject.add_argument("--coalesce", action="store_true", help="fold one block instead of one per source")
    inject.add_argument("--asked-time", type=_iso_time, help=ASKED_TIME_HELP)
    _add_scope_options(inject)

    commands.add_parser(
        "mcp", help="serve memory as MCP tools over stdio or Streamable HTTP (contextfold mcp --help)", add_help=False
    )
    return parser


# Options whose values are opaque tokens that may begin with "-" (an etag is URL-safe base64), which argparse
# would take for an option: each is read joined to its value, as `--etag=VALUE` is.
_OPAQUE_VALUES = ("--etag",)


def _joined(argv: list[str]) -> list[str]:
    """`argv` with each of `_OPAQUE_VALUES` joined to the value after it."""
    joined: list[str] = []
    values = iter(argv)
    for arg in values:
        following = next(values, None) if arg in _OPAQUE_VALUES else None
        joined.append(f"{arg}={following}" if following is not None else arg)
    return joined


def main(argv: Sequence[str] | None = None) -> int:
    argv = _joined(list(sys.argv[1:] if argv is None else argv))
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if args.command in _SERVER_COMMAND_HELP:
        return _server_command(args.command, rest)
    if args.command == "mcp":
        return _mcp(args, rest)
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    try:
        if args.api_key is not None:
            checked_key(args.api_key, "--api-key")
        with Client(args.address, timeout=args.timeout, api_key=args.api_key) as cf:
            {"stores": _stores, "memory": _memory, "providers": _providers, "inject": _inject}[args.command](args, cf)
    except InvalidApiKey as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    except ContextfoldError as error:
        print(f"error: {error.code.name}: {error.message}", file=sys.stderr)
        if error.reason:
            print(f"  reason: {error.reason}", file=sys.stderr)
        for field, description in error.field_violations:
            print(f"  {field}: {description}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
