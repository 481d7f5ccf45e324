"""Write a context provider in a few lines: a function from the injection context to text.

    from contextfold.provider import serve_provider

    def now(context):
        return f"<now>{datetime.now(UTC).isoformat()}</now>"

    serve_provider(now, "127.0.0.1:50061")

Register it with `ProviderService.RegisterProvider` (target `127.0.0.1:50061`)
and every `Inject` in its namespace asks it. The function may be sync or
async; returning None or "" means nothing this call. Its text is folded in as
returned: escape what you interpolate into markup (`escape_xml`).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf import json_format

from .convert import MessageDict, from_proto_messages
from .v1 import provider_pb2, provider_pb2_grpc

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ProvideContext:
    """What a provider is told about the model call it contributes to."""

    messages: list[MessageDict]
    app_state: dict[str, Any]
    agent: dict[str, str]
    # The name the provider is registered under.
    provider: str
    # Seconds until contextfold stops waiting; None when it set no deadline.
    time_remaining: float | None
    # The namespace (tenant) the call is made for, and the id of the Inject call.
    namespace: str = ""
    request_id: str = ""


ProvideFunction = Callable[[ProvideContext], "str | Awaitable[str | None] | None"]


def escape_xml(value: str) -> str:
    """Escape text for XML content or a quoted attribute: `&` first, then `<`, `>`, `"`, `'`."""
    return (
        value.replace("&", "&amp;")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
        .replace('"', "&quot;")
        .replace("'", "&#39;")
    )


class _ProviderServicer(provider_pb2_grpc.ContextProviderServicer):
    def __init__(self, provide: ProvideFunction) -> None:
        self._provide = provide

    async def Provide(
        self, request: provider_pb2.ProvideRequest, context: grpc.aio.ServicerContext
    ) -> provider_pb2.ProvideResponse:
        provide_context = ProvideContext(
            messages=from_proto_messages(request.messages),
            app_state=json_format.MessageToDict(request.app_state),
            agent={"id": request.agent.id, "name": request.agent.name},
            provider=request.provider,
            time_remaining=context.time_remaining(),
            namespace=request.namespace,
            request_id=request.request_id,
        )
        text = self._provide(provide_context)
        if inspect.isawaitable(text):
            text = await text
        return provider_pb2.ProvideResponse(text=text or "")


async def start_provider(provide: ProvideFunction, address: str = "127.0.0.1:0") -> tuple[grpc.aio.Server, int]:
    """Start serving `provide` on `address` in the running event loop; returns the server and its port."""
    server = grpc.aio.server()
    provider_pb2_grpc.add_ContextProviderServicer_to_server(_ProviderServicer(provide), server)
    port = server.add_insecure_port(address)
    await server.start()
    return server, port


def serve_provider(provide: ProvideFunction, address: str = "127.0.0.1:50061", *, grace: float = 5.0) -> None:
    """Serve `provide` on `address` until SIGTERM or SIGINT, then let calls in flight finish."""

    async def run() -> None:
        server, port = await start_provider(provide, address)
        logger.info("provider serving on port %d", port)
        stopping = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stopping.set)
        await stopping.wait()
        await server.stop(grace)

    asyncio.run(run())
