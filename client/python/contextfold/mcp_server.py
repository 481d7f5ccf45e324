"""`contextfold mcp`: memory as Model Context Protocol tools, resources and a prompt.

It is a client of a contextfold server, as the CLI is (`--address`, `--api-key`): each tool makes
one or two of the API's calls with the caller's key, so tenancy, scope-bound keys, quotas and
row-level security hold as they do for any client, and nothing is kept here. Two transports:

- stdio, for a desktop host that starts the command: the key is `--api-key` or CONTEXTFOLD_API_KEY.
- Streamable HTTP, for remote hosts: each request's own key (`Authorization: Bearer <key>`) goes
  to contextfold as sent; this process's key, if it has one, never stands in for a missing one.
  Loopback unless `--host` says otherwise, and stateless: no session outlives its request, so
  nothing one request did runs with another's key.

The tools' argument schemas carry the API's limits (the server checks them again); a call the
arguments or the server refuse comes back as a tool error naming the argument and the reason.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import contextvars
import json
import os
import signal
import socket
import sys
import time
from collections import OrderedDict
from collections.abc import Awaitable, Iterator, Sequence
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from typing import Annotated, Any, Literal, TypeVar

import anyio
import grpc
from google.protobuf.message import Message as ProtoMessage
from mcp.server.mcpserver import MCPServer, UserMessage
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR, INVALID_PARAMS, ToolAnnotations
from pydantic import BaseModel, Field, ValidationError

from ._requests import filter_message, filter_times
from .client import AsyncClient
from .convert import message_dict, render_for_model
from .errors import ContextfoldError, InvalidApiKey
from .keys import checked_key, key_problem
from .v1 import memory_pb2

# The API's limits (contextfold_server.api.fields), for the schemas a model reads; a test holds
# them equal to the server's.
MAX_TEXT_CHARS = 16_384
MAX_RESULTS = 100
MAX_STORES_NAMED = 100
MAX_IDS = 1_000
MAX_MESSAGES = 2_000
# 1 to 63 printable characters, no space at either end; 1 to 128 printable ASCII, no space.
STORE_NAME = r"^[^\s\x00-\x1f\x7f]([^\x00-\x1f\x7f]{0,61}[^\s\x00-\x1f\x7f])?$"
MEMORY_ID = r"^[!-~]{1,128}$"
# The entries a store's resource lists: its first page, oldest first.
RESOURCE_ENTRIES = 100
# Clients kept, one per key seen (each holds its read-after position): the least recent goes first.
MAX_CLIENTS = 256

StoreName = Annotated[str, Field(pattern=STORE_NAME, description="A store's name, as list_stores gives it.")]
MemoryId = Annotated[str, Field(pattern=MEMORY_ID, description="An entry's id, as recall gives it.")]
Metadata = Annotated[
    dict[str, Any] | None,
    Field(description="A JSON object kept with the entry (at most 16 KiB encoded, 16 levels deep)."),
]


class Entry(BaseModel):
    """An entry as stored."""

    id: str
    store: str
    content: str
    metadata: dict[str, Any] = {}
    user_id: str = ""
    agent_id: str = ""
    session_id: str = ""
    create_time: str | None = None
    update_time: str | None = None
    expire_time: str | None = None
    etag: Annotated[str, Field(description="Give it to update_memory or forget to act on this version only.")] = ""


class Found(Entry):
    score: float = Field(description="Cosine similarity to the query, from -1 to 1; higher is closer.")


class Recalled(BaseModel):
    entries: list[Found] = Field(description="Best first.")


class Kept(Entry):
    action: Literal["added", "updated"]


class Remembered(BaseModel):
    entries: list[Kept]
    skipped_turns: Annotated[int, Field(description="Turns of the conversation remembered before, not kept again.")] = 0


class Forgotten(BaseModel):
    deleted: int


class StoreInfo(BaseModel):
    name: str
    description: str = ""
    dimension: int
    memory_count: int = 0
    create_time: str | None = None
    default_ttl_seconds: Annotated[
        float | None, Field(description="Entries expire this long after they are added.")
    ] = None


class Stores(BaseModel):
    stores: list[StoreInfo]


class Turn(BaseModel):
    role: Literal["user", "assistant"]
    text: Annotated[str, Field(min_length=1, max_length=MAX_TEXT_CHARS)]


def _fields(message: ProtoMessage) -> dict[str, Any]:
    return message_dict(message)


def entry(memory: memory_pb2.Memory) -> dict[str, Any]:
    """An entry's fields as the tools return them (its vector is left out)."""
    fields = _fields(memory)
    fields.pop("vector", None)
    return fields


def store_info(store: memory_pb2.Store) -> StoreInfo:
    fields = _fields(store)
    ttl = store.default_ttl.ToTimedelta().total_seconds() if store.HasField("default_ttl") else None
    fields.pop("default_ttl", None)
    return StoreInfo(**{**fields, "memory_count": int(fields.get("memory_count", 0))}, default_ttl_seconds=ttl or None)


def described(error: ContextfoldError, renames: Sequence[tuple[str, str]] = ()) -> str:
    """The status and, for each bad field, the tool's argument it came from and the reason."""
    violations = error.field_violations
    if not violations:
        return f"{error.code.name}: {error.message}"

    def argument(path: str) -> str:
        for prefix, name in renames:
            if path == prefix or path.startswith((prefix + ".", prefix + "[")):
                return name + path[len(prefix) :]
        return path

    return f"{error.code.name}: " + "; ".join(f"{argument(path)}: {why}" for path, why in violations)


Result = TypeVar("Result")

# The key a Streamable HTTP request brought (its bearer token), for the calls it makes.
_request_key: contextvars.ContextVar[str] = contextvars.ContextVar("contextfold_mcp_request_key", default="")


class BearerKey:
    """ASGI middleware: each HTTP request's `Authorization: Bearer` key, as the key its calls carry."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        authorization = dict(scope["headers"]).get(b"authorization", b"").decode("latin-1")
        scheme, _, key = authorization.partition(" ")
        token = _request_key.set(key.strip() if scheme.lower() == "bearer" else "")
        try:
            await self.app(scope, receive, send)
        finally:
            _request_key.reset(token)


@dataclass
class Settings:
    """What every call of one `contextfold mcp` process shares."""

    address: str
    # stdio's key; over HTTP each request brings its own and this is None.
    api_key: str | None
    timeout: float = 10.0
    # The scope every call acts in (a scope-bound key confines it further).
    scope: dict[str, str] = field(default_factory=dict)
    # The stores recall searches when it names none (none: every store), and where remember writes.
    stores: list[str] = field(default_factory=list)


class Memory:
    """The tools' calls to contextfold: one channel, a client per caller's key."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._channel: grpc.aio.Channel | None = None
        self._clients: OrderedDict[str, AsyncClient] = OrderedDict()

    def client(self) -> AsyncClient:
        """The client for this call's key: stdio's, or the HTTP request's own (never stdio's)."""
        key = self.settings.api_key if self.settings.api_key is not None else _request_key.get()
        if key and (problem := key_problem(key)):
            raise ToolError(f"the API key in the request's Authorization header {problem}")
        if self._channel is None:
            self._channel = grpc.aio.insecure_channel(self.settings.address)
        client = self._clients.pop(key, None) or AsyncClient(
            channel=self._channel, api_key=key, timeout=self.settings.timeout
        )
        self._clients[key] = client
        while len(self._clients) > MAX_CLIENTS:
            self._clients.popitem(last=False)
        return client

    @property
    def scope(self) -> dict[str, str] | None:
        return self.settings.scope or None

    async def call(self, call: Awaitable[Result], renames: Sequence[tuple[str, str]] = ()) -> Result:
        """The call's result, or a tool error naming what was refused and why."""
        try:
            return await call
        except ContextfoldError as error:
            raise ToolError(described(error, renames)) from None

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()


def _filter(value: dict[str, Any]) -> memory_pb2.Filter | None:
    """`recall`'s filter, as the Python client reads a dict (time bounds in ISO 8601)."""
    try:
        return filter_message(filter_times(value))
    except (TypeError, ValueError, AttributeError, KeyError) as error:
        raise ToolError(f"filter: {error}") from None


class _Server(MCPServer[Any]):
    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        """Arguments the schema refuses come back as the argument's name and the reason, without the
        value sent (the caller's data) or the validator's links."""
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as error:
            cause = error.__cause__
            if not isinstance(cause, ValidationError):
                raise
            reasons = "; ".join(
                f"{'.'.join(str(part) for part in problem['loc']) or 'arguments'}: {problem['msg']}"
                for problem in cause.errors()
            )
            raise ToolError(f"Error executing tool {name}: INVALID_ARGUMENT: {reasons}") from cause


INSTRUCTIONS = (
    "Long-term memory kept by contextfold, shared with this user's other assistants and agents. "
    "Call recall before answering anything that may depend on earlier conversations (the user's "
    "preferences, facts about them, decisions, names); call remember when the user tells you "
    "something worth keeping; correct or remove what turns out wrong with update_memory and forget."
)


def build(settings: Settings) -> tuple[MCPServer[Any], Memory]:
    """The MCP server's tools, resources and prompt over `settings`' contextfold."""
    memory = Memory(settings)
    # The SDK's own log is of calls the caller already sees the outcome of: warnings and worse only.
    server = _Server("contextfold", instructions=INSTRUCTIONS, version=_version(), log_level="WARNING")

    @server.tool(
        name="recall",
        description=(
            "Search long-term memory for what is relevant to a question or topic. Returns the best "
            "entries first, each with its store, score (cosine, higher is closer), id, times and etag."
        ),
        annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False),
    )
    async def recall(
        query: Annotated[
            str, Field(min_length=1, max_length=MAX_TEXT_CHARS, description="What to look for, in plain words.")
        ],
        stores: Annotated[
            list[StoreName] | None,
            Field(max_length=MAX_STORES_NAMED, description="Search only these stores; default: the usual ones."),
        ] = None,
        max_results: Annotated[int, Field(ge=1, le=MAX_RESULTS, description="Entries at most.")] = 5,
        filter: Annotated[
            dict[str, Any] | None,
            Field(
                description=(
                    'Only entries whose metadata matches, e.g. {"topic": "food", "rating": {"gte": 3}}; '
                    'tests: eq, in, contains, gt, gte, lt, lte, exists; {"all"|"any": [...]}, {"not": {...}}; '
                    "create_time, update_time and expire_time take ISO 8601 bounds."
                )
            ),
        ] = None,
        min_score: Annotated[
            float | None, Field(ge=-1, le=1, description="Only entries at least this similar (cosine).")
        ] = None,
    ) -> Recalled:
        options: dict[str, Any] = {"stores": stores or settings.stores, "max_results": max_results}
        if filter is not None:
            options["filter"] = _filter(filter)
        if min_score is not None:
            options["min_score"] = min_score
        results = await memory.call(memory.client().search_memories(query, scope=memory.scope, **options))
        return Recalled(entries=[Found(**entry(result.memory), score=result.score) for result in results])

    @server.tool(
        name="remember",
        description=(
            "Keep something for later conversations: a fact (one short, self-contained statement, "
            "e.g. 'The user is allergic to peanuts'), or the turns of a conversation (its user turns "
            "are kept, each once). Give one of fact or conversation."
        ),
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False),
    )
    async def remember(
        fact: Annotated[str | None, Field(min_length=1, max_length=MAX_TEXT_CHARS, description="The fact.")] = None,
        conversation: Annotated[
            list[Turn] | None, Field(min_length=1, max_length=MAX_MESSAGES, description="The turns, oldest first.")
        ] = None,
        store: Annotated[
            str | None, Field(pattern=STORE_NAME, description="Where to keep it; default: the usual store.")
        ] = None,
        metadata: Metadata = None,
    ) -> Remembered:
        if (fact is None) == (conversation is None):
            raise ToolError("fact, conversation: give one of them")
        target = store or next(iter(settings.stores), None)
        if target is None:
            raise ToolError("store: name the store to keep it in (list_stores names them)")
        client = memory.client()
        if fact is not None:
            new = {**(memory.scope or {}), "content": fact, **({"metadata": metadata} if metadata is not None else {})}
            added = await memory.call(
                client.add_memories(target, [new]),
                renames=(("memories[0].content", "fact"), ("memories[0].metadata", "metadata")),
            )
            return Remembered(entries=[Kept(**entry(kept), action="added") for kept in added])
        assert conversation is not None
        messages = [{"role": turn.role, "content": [{"text": turn.text}]} for turn in conversation]
        response = await memory.call(
            client.remember(target, messages, scope=memory.scope, metadata=metadata),
            renames=(("messages", "conversation"),),
        )
        kept = [
            Kept(**entry(item.memory), action="updated" if item.action == item.ACTION_UPDATED else "added")
            for item in response.memories
        ]
        return Remembered(entries=kept, skipped_turns=response.skipped_turn_count)

    @server.tool(
        name="update_memory",
        description=(
            "Correct an entry recall found: new content and/or metadata (the old version is kept in its "
            "history). With the etag recall gave, only that version changes: if the entry changed "
            "since, nothing is written and the call fails with ABORTED."
        ),
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True),
    )
    async def update_memory(
        id: MemoryId,
        content: Annotated[
            str | None, Field(min_length=1, max_length=MAX_TEXT_CHARS, description="The new text.")
        ] = None,
        metadata: Metadata = None,
        etag: Annotated[str, Field(max_length=256, description="The etag recall gave.")] = "",
    ) -> Entry:
        if content is None and metadata is None:
            raise ToolError("content, metadata: give at least one")
        updated = await memory.call(
            memory.client().update_memory(id, content=content, metadata=metadata, etag=etag),
            renames=(("memory.id", "id"), ("memory.content", "content"), ("memory.metadata", "metadata")),
        )
        return Entry(**entry(updated.memory))

    @server.tool(
        name="forget",
        description=(
            "Delete entries by id, for good (what recall found to be wrong or unwanted). With an etag "
            "(one id only), the entry is deleted only if it has not changed since recall read it."
        ),
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True),
    )
    async def forget(
        ids: Annotated[list[MemoryId], Field(min_length=1, max_length=MAX_IDS, description="The entries' ids.")],
        etag: Annotated[str, Field(max_length=256, description="The etag recall gave (one id only).")] = "",
    ) -> Forgotten:
        return Forgotten(deleted=await memory.call(memory.client().delete_memories(ids, etag=etag)))

    @server.tool(
        name="list_stores",
        description="The memory stores this key can use: each one's name, description, size and expiry.",
        annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False),
    )
    async def list_stores() -> Stores:
        return Stores(stores=await memory.call(_all_stores(memory.client())))

    @server.resource(
        "contextfold://stores",
        name="stores",
        description="Every memory store: name, description, dimension, size, expiry.",
        mime_type="application/json",
    )
    async def stores_resource() -> str:
        try:
            stores = await _all_stores(memory.client())
        except ContextfoldError as error:
            raise ResourceError(described(error)) from None
        return Stores(stores=stores).model_dump_json()

    @server.resource(
        "contextfold://stores/{name}",
        name="store",
        description=f"One store and its first {RESOURCE_ENTRIES} entries, oldest first.",
        mime_type="application/json",
    )
    async def store_resource(name: str) -> str:
        client = memory.client()
        try:
            found = [store for store in await _all_stores(client) if store.name == name]
            if not found:
                raise ResourceError(f"NOT_FOUND: no store named {name!r}")
            entries = []
            async for item in client.list_memories(name, scope=memory.scope, page_size=RESOURCE_ENTRIES):
                entries.append(Entry(**entry(item)).model_dump())
                if len(entries) == RESOURCE_ENTRIES:
                    break
        except ContextfoldError as error:
            raise ResourceError(described(error)) from None
        return json.dumps({"store": found[0].model_dump(), "entries": entries}, ensure_ascii=False)

    @server.prompt(
        name="with_memory",
        description=(
            "A question with what memory holds for it folded in (contextfold's own Inject, as an agent "
            "gets it before its model call)."
        ),
    )
    async def with_memory(
        question: Annotated[str, Field(description="The question to answer.")],
        stores: Annotated[str, Field(description="Stores to search, comma-separated; default: the usual ones.")] = "",
    ) -> list[UserMessage]:
        if not question.strip() or len(question) > MAX_TEXT_CHARS:
            raise MCPError(INVALID_PARAMS, f"question: must be 1 to {MAX_TEXT_CHARS} characters, not all spaces")
        names = [name.strip() for name in stores.split(",") if name.strip()] or settings.stores
        try:
            result = await memory.client().inject(
                [{"role": "user", "content": [{"text": question}]}], stores=names, scope=memory.scope
            )
        except ContextfoldError as error:
            refused = error.code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND)
            raise MCPError(INVALID_PARAMS if refused else INTERNAL_ERROR, described(error)) from None
        (asked,) = render_for_model(result.messages)
        folded = "".join(block["text"] for block in asked["content"] if "text" in block)
        return [UserMessage(folded)]

    return server, memory


async def _all_stores(client: AsyncClient) -> list[StoreInfo]:
    return [store_info(store) async for store in client.list_stores()]


def _version() -> str:
    try:
        return version("contextfold")
    except PackageNotFoundError:
        return ""


def add_options(mcp: argparse.ArgumentParser) -> None:
    """`contextfold mcp`'s own options; the CLI's (`--address`, `--api-key`, `--timeout`) come before `mcp`."""
    mcp.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    mcp.add_argument("--host", default="127.0.0.1", help="http: the address to listen on (default: loopback)")
    mcp.add_argument("--port", type=int, default=8765, help="http: the port (0: any free one)")
    mcp.add_argument("--path", default="/mcp", help="http: the endpoint's path")
    mcp.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        help="http: a Host header to accept (host:port, * for any port); repeat. Loopback's by default",
    )
    mcp.add_argument(
        "--store", action="append", default=[], help="a store recall searches (default: all); the first: remember's"
    )
    mcp.add_argument("--user-id", default="", help="the user every call acts for")
    mcp.add_argument("--agent-id", default="")
    mcp.add_argument("--session-id", default="")


def run(common: argparse.Namespace, args: argparse.Namespace) -> int:
    """Serve until stopped: `common` holds the CLI's options, `args` those of `add_options`."""
    http = args.transport == "http"
    if http and common.api_key:
        print("error: over HTTP each caller sends its own key (Authorization: Bearer); drop --api-key", file=sys.stderr)
        return 2
    # Over HTTP each request's own key (None here: CONTEXTFOLD_API_KEY is not read); stdio's is the
    # flag's or the environment's.
    key = None if http else common.api_key if common.api_key is not None else os.environ.get("CONTEXTFOLD_API_KEY", "")
    if key:
        try:
            checked_key(key, "--api-key" if common.api_key is not None else "CONTEXTFOLD_API_KEY")
        except InvalidApiKey as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
    scope = {name: getattr(args, name) for name in ("user_id", "agent_id", "session_id") if getattr(args, name)}
    server, memory = build(Settings(common.address, key, common.timeout, scope, list(args.store)))
    with contextlib.suppress(KeyboardInterrupt):
        anyio.run(_serve_http if http else _serve_stdio, server, memory, args)
    return 0


async def _serve_stdio(server: MCPServer[Any], memory: Memory, _: argparse.Namespace) -> None:
    try:
        await server.run_stdio_async()
    finally:
        await memory.close()


async def _serve_http(server: MCPServer[Any], memory: Memory, args: argparse.Namespace) -> None:
    import uvicorn

    security = None
    if args.allowed_host:
        security = TransportSecuritySettings(allowed_hosts=args.allowed_host, allowed_origins=[])
    app = server.streamable_http_app(
        streamable_http_path=args.path,
        stateless_http=True,
        json_response=True,
        transport_security=security,
        host=args.host,
    )
    listener = socket.create_server((args.host, args.port), family=_family(args.host))
    # Each answer leaves at once: asyncio sets TCP_NODELAY only on sockets made with IPPROTO_TCP, and this
    # one (protocol 0) would hold a response's last segment until the client's delayed ACK, 40 ms later.
    # Accepted connections inherit it.
    listener.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    port = listener.getsockname()[1]
    config = uvicorn.Config(
        BearerKey(app), log_level="warning", lifespan="on", timeout_graceful_shutdown=STOP_GRACE_SECONDS
    )
    served = _stopping_server()(config)
    print(f"contextfold mcp: serving on http://{_shown(args.host)}:{port}{args.path}", file=sys.stderr, flush=True)
    started = time.monotonic()
    try:
        await served.serve(sockets=[listener])
    finally:
        await memory.close()
        listener.close()
    print(f"contextfold mcp: stopped (served {time.monotonic() - started:.0f} s)", file=sys.stderr, flush=True)


# How long calls in flight may take to finish once the HTTP server is told to stop.
STOP_GRACE_SECONDS = 5


def _stopping_server() -> type:
    """uvicorn's server, saying on stderr when a signal stops it: SIGTERM (an orchestrator's stop) and
    SIGINT end it gracefully, calls in flight finishing within `STOP_GRACE_SECONDS`."""
    import uvicorn

    class Stopping(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            # The event loop's handlers, where uvicorn's own would raise the signal again once stopped.
            loop = asyncio.get_running_loop()
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(signum, self.handle_exit, signum, None)
            try:
                yield
            finally:
                for signum in (signal.SIGTERM, signal.SIGINT):
                    loop.remove_signal_handler(signum)

        def handle_exit(self, sig: int, frame: Any) -> None:
            if not self.should_exit:
                name = signal.Signals(sig).name
                print(f"contextfold mcp: stopping ({name}): calls in flight finish", file=sys.stderr, flush=True)
            super().handle_exit(sig, frame)

    return Stopping


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def _shown(host: str) -> str:
    return f"[{host}]" if ":" in host else host
