"""Context providers with every behaviour the fan-out must survive, each a real gRPC server.

Run as a process of its own (`python -m harness.providers`); it prints
one JSON line naming each behaviour's port, then serves until SIGTERM.

- `scripted`: answers `app_state["texts"][provider]` after `app_state["delays"][provider]`
  seconds, so a test scripts several providers through one server; the text `@huge`
  stands for a 2 MiB answer (over the limit), `@large` for 900 KB of words (within it).
- `deadline`: answers with the seconds it was given, as contextfold passed them on.
- `hanging`: never answers. `failing`: answers with an error status; `unavailable`: with UNAVAILABLE.
- `malformed`: answers with bytes that are no ProvideResponse.
- `traceparent`: answers with the W3C `traceparent` its call carried.
- `identity`: answers with who asked, as JSON: the request's namespace and request id, and the
  call's `x-contextfold-namespace` and `x-request-id` metadata.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from collections.abc import Callable
from typing import Any

import grpc
from contextfold.provider import ProvideContext, start_provider
from contextfold.v1 import provider_pb2

HUGE = "x" * (2 * 1024 * 1024)
LARGE = "word " * 180_000


async def scripted(context: ProvideContext) -> str:
    await asyncio.sleep(float(context.app_state.get("delays", {}).get(context.provider, 0)))
    text = context.app_state.get("texts", {}).get(context.provider, "")
    return {"@huge": HUGE, "@large": LARGE}.get(text, text)


def deadline(context: ProvideContext) -> str:
    return f"{context.time_remaining:.3f}"


async def hanging(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
    await asyncio.Event().wait()
    return b""


async def failing(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
    await context.abort(grpc.StatusCode.INTERNAL, "provider exploded")
    return b""


async def unavailable(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
    await context.abort(grpc.StatusCode.UNAVAILABLE, "down for maintenance")
    return b""


async def malformed(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
    return b"\xff\xff\xff\xff"


async def traceparent(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
    sent = dict(context.invocation_metadata() or ())
    return provider_pb2.ProvideResponse(text=sent.get("traceparent", "")).SerializeToString()


async def identity(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
    sent = dict(context.invocation_metadata() or ())
    asked = provider_pb2.ProvideRequest.FromString(request)
    told = {
        "namespace": asked.namespace,
        "request_id": asked.request_id,
        "x-contextfold-namespace": sent.get("x-contextfold-namespace", ""),
        "x-request-id": sent.get("x-request-id", ""),
    }
    return provider_pb2.ProvideResponse(text=json.dumps(told)).SerializeToString()


async def start_raw(handler: Callable[..., Any]) -> tuple[grpc.aio.Server, int]:
    method = grpc.unary_unary_rpc_method_handler(handler)
    service = grpc.method_handlers_generic_handler("contextfold.v1.ContextProvider", {"Provide": method})
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((service,))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, port


async def main() -> None:
    servers = {
        "scripted": await start_provider(scripted),
        "deadline": await start_provider(deadline),
        "hanging": await start_raw(hanging),
        "failing": await start_raw(failing),
        "unavailable": await start_raw(unavailable),
        "malformed": await start_raw(malformed),
        "traceparent": await start_raw(traceparent),
        "identity": await start_raw(identity),
    }
    print(json.dumps({name: port for name, (_, port) in servers.items()}), flush=True)
    stopping = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(signum, stopping.set)
    await stopping.wait()
    await asyncio.gather(*(server.stop(0) for server, _ in servers.values()))


if __name__ == "__main__":
    asyncio.run(main())
    sys.exit(0)
