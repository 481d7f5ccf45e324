"""The console's routes: its pages, and a JSON door to the same RPCs every client calls.

`POST /api/<Service>/<Method>` takes the request message as proto3 JSON and answers the response
as proto3 JSON. The call goes to the worker's own gRPC server, through a socket only this process
can reach, with the browser's `authorization` header as it came: the key is checked, confined to its
scope, admitted and counted by the same pipeline as any call, so a page never reaches what the key
could not reach through the API. Only the methods the pages use pass, and the console is read-only
for agent keys: correcting and erasing take an admin key (the API would let an agent key write
entries; an operator's console does not). `POST /api/whoami` says whose the key is.

Safe by construction: no cookies (the key lives in the tab's session storage and travels in a header,
so another site's page cannot make a call with it), JSON only, a cross-site `Origin` refused, a strict
Content-Security-Policy on every response (scripts and styles from this server only, no inline code),
and pages that never turn data into markup (console.js sets text, never HTML). A request's body is at
most 1 MiB and a list at most `MAX_PAGE` entries, so converting either on the event loop takes a few
milliseconds at most.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from importlib import resources
from typing import Any

import grpc
from contextfold.errors import from_rpc_error
from contextfold.v1 import injection_pb2, memory_pb2, provider_pb2
from google.protobuf import json_format
from google.protobuf.message import Message

from ..access.keys import OPEN_CALLER, Caller, KeyRing, bearer_key
from ..postgres.consistency import TOKEN_HEADER
from .http import Request, Response

# The longest a console call may take.
CALL_SECONDS = 30.0
# The most entries, versions or providers one page of the console asks for.
MAX_PAGE = 100

SECURITY_HEADERS = [
    (
        "content-security-policy",
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self';"
        " base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    ),
    ("x-content-type-options", "nosniff"),
    ("x-frame-options", "DENY"),
    ("referrer-policy", "no-referrer"),
    ("cross-origin-opener-policy", "same-origin"),
    ("cross-origin-resource-policy", "same-origin"),
]

_PAGES = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/console.js": ("console.js", "text/javascript; charset=utf-8"),
    "/console.css": ("console.css", "text/css; charset=utf-8"),
    "/favicon.svg": ("favicon.svg", "image/svg+xml"),
}


@dataclass(frozen=True)
class _Method:
    service: str
    request: type[Message]
    response: type[Message]
    # Changes what memory holds: an admin key's only.
    writes: bool = False


_METHODS = {
    "MemoryService/ListStores": _Method("MemoryService", memory_pb2.ListStoresRequest, memory_pb2.ListStoresResponse),
    "MemoryService/ListMemories": _Method(
        "MemoryService", memory_pb2.ListMemoriesRequest, memory_pb2.ListMemoriesResponse
    ),
    "MemoryService/GetMemory": _Method("MemoryService", memory_pb2.GetMemoryRequest, memory_pb2.GetMemoryResponse),
    "MemoryService/ListMemoryVersions": _Method(
        "MemoryService", memory_pb2.ListMemoryVersionsRequest, memory_pb2.ListMemoryVersionsResponse
    ),
    "MemoryService/UpdateMemory": _Method(
        "MemoryService", memory_pb2.UpdateMemoryRequest, memory_pb2.UpdateMemoryResponse, writes=True
    ),
    "MemoryService/EraseMemories": _Method(
        "MemoryService", memory_pb2.EraseMemoriesRequest, memory_pb2.EraseMemoriesResponse, writes=True
    ),
    "InjectionService/Inject": _Method("InjectionService", injection_pb2.InjectRequest, injection_pb2.InjectResponse),
    "ProviderService/ListProviders": _Method(
        "ProviderService", provider_pb2.ListProvidersRequest, provider_pb2.ListProvidersResponse
    ),
}

_HTTP_STATUS = {
    grpc.StatusCode.INVALID_ARGUMENT: HTTPStatus.BAD_REQUEST,
    grpc.StatusCode.FAILED_PRECONDITION: HTTPStatus.BAD_REQUEST,
    grpc.StatusCode.OUT_OF_RANGE: HTTPStatus.BAD_REQUEST,
    grpc.StatusCode.UNAUTHENTICATED: HTTPStatus.UNAUTHORIZED,
    grpc.StatusCode.PERMISSION_DENIED: HTTPStatus.FORBIDDEN,
    grpc.StatusCode.NOT_FOUND: HTTPStatus.NOT_FOUND,
    grpc.StatusCode.ALREADY_EXISTS: HTTPStatus.CONFLICT,
    grpc.StatusCode.ABORTED: HTTPStatus.CONFLICT,
    grpc.StatusCode.RESOURCE_EXHAUSTED: HTTPStatus.TOO_MANY_REQUESTS,
    grpc.StatusCode.UNAVAILABLE: HTTPStatus.SERVICE_UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED: HTTPStatus.GATEWAY_TIMEOUT,
    grpc.StatusCode.UNIMPLEMENTED: HTTPStatus.NOT_IMPLEMENTED,
}


class Console:
    def __init__(self, api: Callable[[], grpc.aio.Channel], keys: KeyRing, host: str) -> None:
        self._api = api
        self._keys = keys
        self._hosts = _allowed_hosts(host)
        self._pages = {
            path: (resources.files(__package__).joinpath("static", name).read_bytes(), kind)
            for path, (name, kind) in _PAGES.items()
        }

    async def handle(self, request: Request) -> Response:
        if self._hosts is not None and _host_name(request.headers.get("host", "")) not in self._hosts:
            # A name this console does not answer to: a page of another site, rebinding its name to this one.
            return _error(
                HTTPStatus.MISDIRECTED_REQUEST, "HOST_NOT_ALLOWED", "this console does not answer to that host"
            )
        if request.method in ("GET", "HEAD") and request.path in self._pages:
            body, kind = self._pages[request.path]
            return Response(HTTPStatus.OK, body, [("content-type", kind), ("cache-control", "no-cache")])
        if not request.path.startswith("/api/"):
            return _error(HTTPStatus.NOT_FOUND, "NOT_FOUND", f"no page at {request.path[:100]}")
        if request.method != "POST":
            return _error(HTTPStatus.METHOD_NOT_ALLOWED, "METHOD_NOT_ALLOWED", "the console's API takes POST")
        refused = self._refused(request)
        if refused is not None:
            return refused
        name = request.path.removeprefix("/api/")
        if name == "whoami":
            return self._whoami(request)
        method = _METHODS.get(name)
        if method is None:
            return _error(HTTPStatus.NOT_FOUND, "NOT_FOUND", f"the console does not call {name[:100]}")
        caller = self._caller(request)
        # A key that is not valid goes on, to be refused as any call is.
        if method.writes and caller is not None and caller.role != "admin":
            return _error(
                HTTPStatus.FORBIDDEN,
                "CONSOLE_READ_ONLY",
                f"{name.rsplit('/', 1)[1]} needs an admin key: the console is read-only for agent keys",
                grpc_code="PERMISSION_DENIED",
            )
        return await self._call(request, name, method)

    def _refused(self, request: Request) -> Response | None:
        """Why a call to the API may not go ahead: not JSON, or sent by a page of another origin."""
        if request.headers.get("content-type", "").split(";")[0].strip().lower() != "application/json":
            return _error(HTTPStatus.UNSUPPORTED_MEDIA_TYPE, "JSON_REQUIRED", "send content-type: application/json")
        origin = request.headers.get("origin")
        host = request.headers.get("host", "")
        if origin is not None and origin not in (f"http://{host}", f"https://{host}"):
            return _error(HTTPStatus.FORBIDDEN, "CROSS_ORIGIN", "calls come from the console's own pages only")
        if request.headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none"):
            return _error(HTTPStatus.FORBIDDEN, "CROSS_ORIGIN", "calls come from the console's own pages only")
        return None

    def _caller(self, request: Request) -> Caller | None:
        if not self._keys.required:
            return OPEN_CALLER
        key = bearer_key(request.headers.get("authorization", ""))
        return self._keys.caller(key) if key else None

    def _whoami(self, request: Request) -> Response:
        caller = self._caller(request)
        if caller is None:
            return _error(
                HTTPStatus.UNAUTHORIZED,
                "API_KEY_INVALID",
                "the API key is not valid, or it was revoked",
                "UNAUTHENTICATED",
            )
        return _json(
            HTTPStatus.OK,
            {
                "namespace": caller.namespace,
                "role": caller.role,
                "userId": caller.user_id,
                "agentId": caller.agent_id,
                "keyId": caller.key_id,
                "canWrite": caller.role == "admin",
                "canManage": caller.role == "admin" and not (caller.user_id or caller.agent_id),
            },
        )

    async def _call(self, request: Request, name: str, method: _Method) -> Response:
        try:
            message = json_format.Parse(request.body or b"{}", method.request())
        except (json_format.ParseError, ValueError, TypeError, RecursionError) as error:
            return _error(HTTPStatus.BAD_REQUEST, "MALFORMED_JSON", f"the request is not a {name} request: {error}")
        if hasattr(message, "page_size"):
            message.page_size = min(message.page_size or MAX_PAGE, MAX_PAGE)
        metadata = [(key, value) for key, value in request.headers.items() if key in ("authorization", TOKEN_HEADER)]
        call = self._api().unary_unary(
            f"/contextfold.v1.{name}",
            request_serializer=method.request.SerializeToString,
            response_deserializer=method.response.FromString,
        )
        try:
            answer = call(message, metadata=metadata, timeout=CALL_SECONDS)
            response = await answer
            trailing = await answer.trailing_metadata()
        except grpc.aio.AioRpcError as error:
            return _status(error)
        headers = [(key, str(value)) for key, value in trailing or () if key == TOKEN_HEADER]
        return _json(HTTPStatus.OK, json_format.MessageToDict(response), headers)


def _allowed_hosts(host: str) -> set[str] | None:
    """The host names a console on loopback answers to, on any port (a tunnel or `kubectl port-forward`
    may bring it to another); None (any) when it listens beyond loopback."""
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        loopback = False
    return {"localhost", "127.0.0.1", "[::1]"} if loopback else None


def _host_name(header: str) -> str:
    """A `Host` header's name, without its port: `[::1]:8080` is `[::1]`, `localhost:8080` `localhost`."""
    name = header.strip().lower()
    if name.startswith("["):
        return name[: name.find("]") + 1] if "]" in name else name
    return name.partition(":")[0]


def _status(error: grpc.aio.AioRpcError) -> Response:
    """A gRPC status as the console's error: its code, message, reason and the fields at fault."""
    body: dict[str, Any] = {"code": error.code().name, "message": error.details() or ""}
    # Its details as the client reads them.
    decoded = from_rpc_error(error)
    if decoded.reason is not None:
        body["reason"] = decoded.reason
    if decoded.field_violations:
        body["fieldViolations"] = [
            {"field": field, "description": description} for field, description in decoded.field_violations
        ]
    return _json(_HTTP_STATUS.get(error.code(), HTTPStatus.INTERNAL_SERVER_ERROR), body)


def _error(status: int, reason: str, message: str, grpc_code: str = "") -> Response:
    code = grpc_code or {400: "INVALID_ARGUMENT", 403: "PERMISSION_DENIED", 404: "NOT_FOUND"}.get(status, reason)
    return _json(status, {"code": code, "message": message, "reason": reason})


def _json(status: int, value: Any, headers: list[tuple[str, str]] | None = None) -> Response:
    body = json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()
    return Response(
        status,
        body,
        [("content-type", "application/json; charset=utf-8"), ("cache-control", "no-store"), *(headers or [])],
    )
