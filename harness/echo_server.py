"""A bare `grpc.aio` server answering one unary method with the bytes it was sent: what the
cheapest gRPC call costs a Python process, for bench/inject.py to set contextfold's CPU per call
beside. Run as `python -m harness.echo_server`: it prints its port, then serves until SIGTERM."""

from __future__ import annotations

import asyncio
import signal

import grpc

METHOD = "/echo.Echo/Call"


async def serve() -> None:
    async def echo(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        return request

    handler = grpc.method_handlers_generic_handler("echo.Echo", {"Call": grpc.unary_unary_rpc_method_handler(echo)})
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(port, flush=True)
    stopping = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stopping.set)
    await stopping.wait()
    await server.stop(1)


if __name__ == "__main__":
    asyncio.run(serve())
