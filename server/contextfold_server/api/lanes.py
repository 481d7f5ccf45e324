"""Two lanes: interactive calls in the workers, bulk calls in the bulk workers, at a lower CPU priority.

A model call waits on Inject and SearchMemories; nothing waits like that on an add of a thousand
entries, an import or an export. So each kind runs in processes of its own: the workers serve the
interactive calls, at the machine's usual priority, and forward every bulk call (`BULK_METHODS`) to
a bulk worker (`bulk.py`), which runs it at a lower one (`--bulk-nice`) with a model session, a
database pool and database sessions of its own. Where both want a core, the kernel gives it to the
query: the bulk call waits, no call is refused for it, and no query shares a model batch, an event
loop or a connection with bulk work.

A worker admits a bulk call as any other (its key, its quotas, its slot among the calls in flight),
then forwards its bytes unread, over a Unix socket in a folder only this server's user may enter,
with what the bulk worker must know of it (`FORWARDED`: the caller, the request id, the position its
reads must see) and the caller's own deadline. The bulk worker decodes it, runs it for that caller,
and answers with the bytes of its answer and, in its trailers, what the call wrote (`RESULT`): the
worker hands the caller its read-after token as for any write. A bulk worker's status, with its
details, reaches the caller as the bulk worker sent it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import json
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import grpc

from ..access.keys import Caller
from ..errors import ServiceError, Unavailable
from ..postgres.consistency import CALL_POSITION, CallPosition
from .call import CALL, Call, deadline_for
from .codec import Codec
from .methods import BULK_METHODS, READ_ONLY_METHODS
from .status import abort_with

logger = logging.getLogger(__name__)

# What a worker tells the bulk worker of a call it forwards (JSON); and what the bulk worker tells back.
FORWARDED = "x-contextfold-forwarded"
RESULT = "x-contextfold-forwarded-result"
# The trailer that carries a status' details: its presence tells a bulk worker's status from the channel's.
_DETAILS = "grpc-status-details-bin"
# How long a forwarded call waits for a bulk worker that is not there yet (restarting), at most.
_WAIT_FOR_BULK_WORKER = 10.0


class Relayed(Exception):
    """A bulk worker's status, for the worker to end the caller's call with, as it came."""

    def __init__(self, code: grpc.StatusCode, details: str, trailers: Sequence[tuple[str, str | bytes]]) -> None:
        super().__init__(details)
        self.code = code
        self.details = details
        self.trailers = tuple(trailers)


class BulkLane:
    """A worker's way to the bulk workers: each bulk call forwarded as bytes to one of them, in turn."""

    def __init__(self, addresses: Sequence[str], max_message_bytes: int) -> None:
        # As the worker's own callers: a request as large as the server takes, an answer as large as it gives.
        # And its status as large as it gives it: a refusal's details (which may quote the caller's field) are
        # passed on whole, not cut off by the hop's metadata limit (16 KiB by default) as RESOURCE_EXHAUSTED.
        limits = [
            ("grpc.max_send_message_length", max_message_bytes),
            ("grpc.max_receive_message_length", 4 * max_message_bytes),
            ("grpc.max_metadata_size", 4 * max_message_bytes),
        ]
        self._channels = [grpc.aio.insecure_channel(f"unix:{address}", options=limits) for address in addresses]
        self._turns = itertools.count()

    async def _channel(self, timeout: float | None) -> grpc.aio.Channel:
        """The next bulk worker's channel, once it is connected: one that is restarting is waited for, within
        the caller's time and `_WAIT_FOR_BULK_WORKER` at most (then UNAVAILABLE, retry)."""
        channel = self._channels[next(self._turns) % len(self._channels)]
        if channel.get_state(try_to_connect=True) is not grpc.ChannelConnectivity.READY:
            wait = _WAIT_FOR_BULK_WORKER if timeout is None else min(timeout, _WAIT_FOR_BULK_WORKER)
            try:
                await asyncio.wait_for(channel.channel_ready(), wait)
            except TimeoutError:
                raise _unreachable() from None
        return channel

    async def close(self) -> None:
        for channel in self._channels:
            await channel.close()

    async def unary(self, method: str, request: bytes, timeout: float | None) -> bytes:
        """The answer's bytes to one unary bulk call."""
        call = (await self._channel(timeout)).unary_unary(method)(request, **_forwarding(timeout))
        return await _relaying(call)

    async def gathered(self, method: str, requests: AsyncIterator[bytes], timeout: float | None) -> bytes:
        """The answer's bytes to a bulk call that streams its requests (ImportMemories), each sent on as it
        comes: whatever ends the caller's stream early (its idle limit, say) cancels the forwarded call."""
        call = (await self._channel(timeout)).stream_unary(method)(**_forwarding(timeout))
        try:
            async for request in requests:
                await call.write(request)
            await call.done_writing()
        except grpc.aio.AioRpcError as error:
            raise _relayed(error) from None
        except BaseException:
            call.cancel()
            raise
        return await _relaying(call)

    async def answers(self, method: str, request: bytes, timeout: float | None) -> AsyncGenerator[bytes, None]:
        """The answers' bytes to a bulk call that streams its answers (ExportMemories), each as it comes: the
        bulk worker writes no faster than the caller reads, and the call ends when the caller's does."""
        call = (await self._channel(timeout)).unary_stream(method)(request, **_forwarding(timeout))
        try:
            async for answer in call:
                yield answer
        except grpc.aio.AioRpcError as error:
            raise _relayed(error) from None
        finally:
            call.cancel()
        await _note_result(call)


def _forwarding(timeout: float | None) -> dict[str, Any]:
    """A forwarded call's options: the caller's deadline, and what the bulk worker must know of the call."""
    call, position = CALL.get(), CALL_POSITION.get() or CallPosition()
    sent = {
        "caller": dataclasses.asdict(call.caller),
        "request_id": call.request_id,
        "read_after": [position.read_after, position.read_after_at],
    }
    return {"metadata": ((FORWARDED, json.dumps(sent)),), "timeout": timeout}


async def _relaying(call: Any) -> bytes:
    try:
        answer = await call
    except grpc.aio.AioRpcError as error:
        raise _relayed(error) from None
    await _note_result(call)
    return answer


async def _note_result(call: Any) -> None:
    """What the bulk worker said the call wrote, and which database answered its reads, on the worker's
    own record of the call."""
    position = CALL_POSITION.get()
    for key, value in await call.trailing_metadata() or ():
        if key == RESULT and position is not None and isinstance(value, str):
            result = json.loads(value)
            position.wrote(*result["written"])
            position.answered_by = result["answered_by"] or position.answered_by


def _relayed(error: grpc.aio.AioRpcError) -> Exception:
    """What the caller is told of a forwarded call that failed: the bulk worker's own status (it carries
    its details), or, when the bulk worker could not be reached, that it is not there now."""
    trailers = tuple(error.trailing_metadata() or ())
    if any(key == _DETAILS for key, _ in trailers):
        return Relayed(error.code(), error.details() or "", trailers)
    if error.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
        return Relayed(error.code(), "the call's deadline passed", ())
    logger.warning("code=<%s> reason=<%s> | a bulk worker did not answer", error.code().name, error.details())
    return _unreachable()


def _unreachable() -> Unavailable:
    return Unavailable(
        "BULK_WORKER_UNAVAILABLE", "the server's bulk worker is not answering (it is restarting): retry with backoff"
    )


class BulkCalls(grpc.aio.ServerInterceptor):
    """A bulk worker's side: each call a worker forwarded, decoded and served for the caller the worker
    admitted, its errors as their statuses, what it wrote in its trailers. Only workers reach it (a
    Unix socket in a folder of the server's own), and only bulk methods are served."""

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        method = details.method
        handler = await continuation(details)
        if handler is None or method not in BULK_METHODS:
            return None
        codec = Codec(handler.request_deserializer, handler.response_serializer)
        if handler.unary_unary is not None:
            behavior = handler.unary_unary

            async def serve(data: bytes, context: grpc.aio.ServicerContext) -> bytes | None:
                async with _served(method, context):
                    return codec.encode(await behavior(codec.decode(data), context))
                return None

            return grpc.unary_unary_rpc_method_handler(serve)
        if handler.unary_stream is not None:
            streaming = handler.unary_stream

            async def serve_stream(data: bytes, context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
                async with _served(method, context):
                    async for answer in streaming(codec.decode(data), context):
                        yield codec.encode(answer)

            return grpc.unary_stream_rpc_method_handler(serve_stream)
        receiving = handler.stream_unary

        async def serve_requests(requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext) -> bytes | None:
            async with _served(method, context):
                return codec.encode(await receiving((codec.decode(data) async for data in requests), context))
            return None

        return grpc.stream_unary_rpc_method_handler(serve_requests)


@contextlib.asynccontextmanager
async def _served(method: str, context: grpc.aio.ServicerContext) -> AsyncIterator[None]:
    """One forwarded call, served: its caller and position set for the servicer, as the worker sent them;
    what it wrote in its trailers; a service error as its status."""
    sent = json.loads(next(value for key, value in context.invocation_metadata() or () if key == FORWARDED))
    read_after, read_after_at = sent["read_after"]
    call = Call(Caller(**sent["caller"]), sent["request_id"], deadline_for(context.time_remaining()))
    position = CallPosition(
        read_after=read_after,
        read_after_at=read_after_at,
        replicas_allowed=method in READ_ONLY_METHODS,
        deadline=call.deadline,
    )
    call_token, position_token = CALL.set(call), CALL_POSITION.set(position)
    try:
        yield
        result = {"written": [position.written, position.written_at], "answered_by": position.answered_by}
        context.set_trailing_metadata(((RESULT, json.dumps(result)),))
    except ServiceError as error:
        await abort_with(context, error)
    except (grpc.aio.AbortError, GeneratorExit, asyncio.CancelledError):
        raise
    except Exception:
        # A bug: logged here with its trace, and the caller told nothing of it but that it is one. Sent with
        # its details, as every status of the bulk worker's own is, so the worker relays INTERNAL as it is
        # (a status without them is the hop's failure, which the worker reports as UNAVAILABLE, retry).
        logger.exception("method=<%s> request_id=<%s> | unexpected error", method, call.request_id)
        await abort_with(context, ServiceError("internal error; the server log has the details"))
    finally:
        CALL.reset(call_token)
        CALL_POSITION.reset(position_token)
