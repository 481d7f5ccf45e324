"""A small HTTP/1.1 server on the worker's event loop, for the console: h11 parses, this moves bytes.

Every worker listens on the console's one port (SO_REUSEPORT, as for gRPC), so the console is
served by whichever worker the kernel hands a connection. Bounded for the worst caller: at most
`MAX_CONNECTIONS` open connections per worker, `MAX_HEAD_BYTES` of request line and headers,
`MAX_BODY_BYTES` of body, and `IDLE_SECONDS` to send each request whole (a connection that trickles
bytes is closed). Handlers get the request whole and return the response whole.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from http import HTTPStatus

import h11

logger = logging.getLogger(__name__)

MAX_CONNECTIONS = 64
MAX_HEAD_BYTES = 16 * 1024
MAX_BODY_BYTES = 1024 * 1024
IDLE_SECONDS = 15.0
_READ_BYTES = 64 * 1024
_KNOWN = {status.value for status in HTTPStatus}


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    # Header names in lower case; a header sent more than once keeps its first value.
    headers: dict[str, str]
    body: bytes


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes = b""
    headers: list[tuple[str, str]] = field(default_factory=list)


Handler = Callable[[Request], Awaitable[Response]]


class _TooLarge(Exception):
    pass


class HttpServer:
    def __init__(self, handle: Handler, on_every_response: list[tuple[str, str]]) -> None:
        self._handle = handle
        self._always = on_every_response
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    async def start(self, host: str, port: int) -> None:
        self._server = await asyncio.start_server(self._serve, host, port, reuse_port=True, limit=_READ_BYTES)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if len(self._connections) >= MAX_CONNECTIONS or task is None:
            writer.close()
            return
        self._connections.add(task)
        try:
            await self._exchange(reader, writer)
        except (ConnectionError, TimeoutError, asyncio.IncompleteReadError):
            pass
        finally:
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await writer.wait_closed()

    async def _exchange(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Requests one after another on one connection, for as long as it is kept alive."""
        connection = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
        while True:
            try:
                async with asyncio.timeout(IDLE_SECONDS):
                    request = await _read_request(connection, reader)
            except h11.RemoteProtocolError as error:
                await self._send(connection, writer, _plain(error.error_status_hint, "malformed request"))
                return
            except _TooLarge:
                await self._send(connection, writer, _plain(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "request too large"))
                return
            if request is None:
                return
            try:
                response = await self._handle(request)
            except Exception:
                logger.exception("the console's handler failed")
                response = _plain(HTTPStatus.INTERNAL_SERVER_ERROR, "internal error")
            await self._send(connection, writer, response, head=request.method == "HEAD")
            if connection.our_state is not h11.DONE or connection.their_state is not h11.DONE:
                return
            connection.start_next_cycle()

    async def _send(
        self, connection: h11.Connection, writer: asyncio.StreamWriter, response: Response, head: bool = False
    ) -> None:
        """The response whole; to a HEAD, its head alone (its length as a GET's body would have it)."""
        if connection.our_state is not h11.SEND_RESPONSE:
            return
        headers = [*self._always, *response.headers, ("content-length", str(len(response.body)))]
        reason = HTTPStatus(response.status).phrase.encode() if response.status in _KNOWN else b""
        data = connection.send(h11.Response(status_code=response.status, headers=headers, reason=reason))
        if not head:
            data += connection.send(h11.Data(data=response.body)) or b""
        data += connection.send(h11.EndOfMessage()) or b""
        writer.write(data)
        await writer.drain()


async def _read_request(connection: h11.Connection, reader: asyncio.StreamReader) -> Request | None:
    """The next request whole; None when the peer closed the connection between requests."""
    head: h11.Request | None = None
    body = bytearray()
    while True:
        event = connection.next_event()
        if event is h11.NEED_DATA:
            data = await reader.read(_READ_BYTES)
            if not data and head is None and connection.their_state is h11.IDLE:
                return None
            connection.receive_data(data)
        elif isinstance(event, h11.Request):
            head = event
            declared = dict(event.headers).get(b"content-length", b"0")
            if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
                raise _TooLarge
        elif isinstance(event, h11.Data):
            body += event.data
            if len(body) > MAX_BODY_BYTES:
                raise _TooLarge
        elif isinstance(event, h11.EndOfMessage):
            assert head is not None
            headers: dict[str, str] = {}
            for name, value in head.headers:
                headers.setdefault(name.decode("latin-1"), value.decode("latin-1"))
            target = head.target.decode("latin-1")
            return Request(head.method.decode("ascii"), target.partition("?")[0], headers, bytes(body))
        elif isinstance(event, h11.ConnectionClosed):
            return None


def _plain(status: int, text: str) -> Response:
    return Response(status, text.encode(), [("content-type", "text/plain; charset=utf-8")])
