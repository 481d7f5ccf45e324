"""What every contextfold call goes through before and after its servicer.

In order: a request id (the caller's `x-request-id`, or a new one, returned in the
answer's initial metadata); a server span joined to the caller's W3C trace context;
readiness (UNAVAILABLE while the database or the model is starting); load shedding
(RESOURCE_EXHAUSTED past the limit of calls in flight, rather than a queue that grows
without bound); the caller's API key, namespace and role, and whether it may make the
call (`access/policy.py`); the call's deadline (`call.py`), once; then the servicer, or,
for a bulk call (`methods.py`), a bulk worker, which the call's bytes are forwarded to unread
(`lanes.py`). Whatever the servicer raises leaves here as its status, in one place: a service
error with its details, a bulk worker's status as it sent it, anything else as INTERNAL. Each
call ends with its metrics and one JSON log line, which says (`loop_stall_ms`) when the call
waited on a busy event loop.
Health and reflection calls pass straight through.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import re
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
from contextfold.v1 import injection_pb2
from google.protobuf.message import DecodeError
from opentelemetry.trace import SpanKind, Status, StatusCode

from ..access.keys import OPEN_CALLER, Caller, KeyRing, bearer_key
from ..access.policy import authorize
from ..access.quotas import QuotaBook
from ..errors import (
    CallTooLong,
    InvalidArgument,
    ResourceExhausted,
    ServiceError,
    Starting,
    StreamIdle,
    Unauthenticated,
)
from ..observe.logs import log_call
from ..observe.loop_lag import NOTEWORTHY, LoopLagMonitor
from ..observe.metrics import Metrics
from ..observe.tracing import context_from_metadata, tracer
from ..observe.usage import UsageCounters
from ..postgres.consistency import CALL_POSITION, TOKEN_HEADER, CallPosition, ReadAfterTokens
from .admission import Admission
from .call import CALL, Call, CallLimits, deadline_for
from .codec import Codec
from .fields import malformed
from .lanes import BulkLane, Relayed
from .methods import BULK_METHODS, INJECT, READ_ONLY_METHODS, STREAMING_METHODS
from .readiness import Readiness
from .shape import check_inject_shape
from .status import abort_with

logger = logging.getLogger(__name__)

_REQUEST_ID = re.compile(r"[\x21-\x7e]{1,128}")


Behavior = Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]]


class CallPipeline(grpc.aio.ServerInterceptor):
    def __init__(
        self,
        metrics: Metrics,
        admission: Admission,
        quotas: QuotaBook,
        usage: UsageCounters,
        keys: KeyRing,
        readiness: Readiness,
        lag: LoopLagMonitor,
        limits: CallLimits,
        bulk: BulkLane,
    ) -> None:
        self._metrics = metrics
        self._bulk = bulk
        # Set once the worker has read the service's secret, before it takes calls (`serve_with`).
        self._read_after: ReadAfterTokens | None = None
        self._lag = lag
        self._admission = admission
        self._quotas = quotas
        self._usage = usage
        self._keys = keys
        self._readiness = readiness
        self._limits = limits

    @property
    def in_flight(self) -> int:
        return self._admission.in_flight

    def serve_with(self, read_after: ReadAfterTokens) -> None:
        """What the pipeline needs of the started worker: the read-after tokens, sealed with its secret."""
        self._read_after = read_after

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        method = details.method
        if handler is None:
            return handler
        if not method.startswith("/contextfold."):
            # Health and reflection: decoded here too, so a request that does not parse is the
            # caller's INVALID_ARGUMENT, not gRPC's UNKNOWN naming a Python exception.
            return _decoding_requests(handler)
        codec = Codec(handler.request_deserializer, handler.response_serializer, _SHAPE_CHECKS.get(method))
        forwarded = method in BULK_METHODS
        idle = self._limits.stream_idle_seconds
        # Bytes in, bytes out: the pipeline decodes and encodes an interactive call's messages (so one that
        # does not parse is the caller's error), and passes a bulk call's on to a bulk worker unread.
        if handler.unary_unary is not None:
            behavior: Behavior = handler.unary_unary

            async def answer(data: bytes, context: grpc.aio.ServicerContext, outcome: dict[str, Any]) -> bytes:
                if forwarded:
                    return await self._bulk.unary(method, data, self._forwarded_timeout(method, context))
                response = await behavior(codec.decode(data), context)
                if method == INJECT and isinstance(response, injection_pb2.InjectResponse):
                    self._metrics.observe_injection(CALL.get().namespace, response.report)
                    self._usage.count(CALL.get().namespace, "tokens_injected", response.report.total_tokens)
                    outcome.update(_injection_fields(response.report))
                return codec.encode(response)

            async def serve(data: bytes, context: grpc.aio.ServicerContext) -> bytes | None:
                async with self._call(method, context) as outcome:
                    longest = self._longest(method, context)
                    bounded = asyncio.timeout(longest)
                    try:
                        async with bounded:
                            encoded = await answer(data, context, outcome)
                    except TimeoutError:
                        if not bounded.expired():
                            raise
                        raise CallTooLong(
                            "CALL_TOO_LONG",
                            f"the call set no deadline and ran past the server's longest, {longest:g} s",
                        ) from None
                    # Headers go with the answer, not before: a call cut off before it answers has sent
                    # nothing, so a proxy may still retry it on another replica.
                    await context.send_initial_metadata((("x-request-id", CALL.get().request_id),))
                    return encoded
                return None

            return grpc.unary_unary_rpc_method_handler(serve)
        # Every stream is bulk work (`methods.py`): its messages go to and come from a bulk worker as they are.
        if handler.unary_stream is not None:

            async def serve_stream(data: bytes, context: grpc.aio.ServicerContext) -> None:
                async with (
                    self._call(method, context),
                    contextlib.aclosing(self._bulk.answers(method, data, context.time_remaining())) as answers,
                ):
                    await context.send_initial_metadata((("x-request-id", CALL.get().request_id),))
                    async for encoded in answers:
                        # An answer the caller does not read in time ends the stream: it holds a slot.
                        await self._within(idle, context.write(encoded), "no answer was read")

            return grpc.unary_stream_rpc_method_handler(serve_stream)
        if handler.stream_unary is not None:

            async def serve_requests(requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext) -> bytes | None:
                async with self._call(method, context):

                    async def received() -> AsyncIterator[bytes]:
                        incoming = aiter(requests)
                        while True:
                            try:
                                data = await self._within(idle, anext(incoming), "no request came")
                            except StopAsyncIteration:
                                return
                            yield data

                    encoded = await self._bulk.gathered(method, received(), context.time_remaining())
                    await context.send_initial_metadata((("x-request-id", CALL.get().request_id),))
                    return encoded
                return None

            return grpc.stream_unary_rpc_method_handler(serve_requests)
        raise TypeError(f"{method}: contextfold has no bidirectional streaming methods")

    def _forwarded_timeout(self, method: str, context: grpc.aio.ServicerContext) -> float | None:
        """A forwarded unary call's deadline: the caller's; for a call that set none, a moment past the
        server's longest, so the worker's own limit ends it first (CALL_TOO_LONG)."""
        longest = self._longest(method, context)
        return context.time_remaining() if longest is None else longest + 1.0

    @contextlib.asynccontextmanager
    async def _call(self, method: str, context: grpc.aio.ServicerContext) -> AsyncIterator[dict[str, Any]]:
        """One call's admission and accounting, around its servicer: the request id, the span, the key
        (the caller, set for the servicer), the calls in flight; a service error as its status; then the
        metrics and the log line, which carries what the servicer adds to the dict it is given."""
        started = time.perf_counter()
        metadata = context.invocation_metadata() or ()
        sent = {key: value for key, value in metadata if isinstance(value, str)}
        request_id = sent.get("x-request-id", "")
        if not _REQUEST_ID.fullmatch(request_id):
            request_id = uuid.uuid4().hex
        caller: Caller | None = None
        outcome: dict[str, Any] = {}
        with tracer.start_as_current_span(
            method.lstrip("/"),
            context=context_from_metadata(metadata),
            kind=SpanKind.SERVER,
            attributes={"rpc.system": "grpc", "rpc.method": method, "contextfold.request_id": request_id},
        ) as span:
            try:
                caller = self._admit(method, [value for key, value in metadata if key == "authorization"])
                span.set_attribute("contextfold.namespace", caller.namespace)
                position = self._call_position(method, caller.namespace, sent.get(TOKEN_HEADER))
                try:
                    self._quotas.take(caller.namespace, writes=method not in READ_ONLY_METHODS)
                    self._admission.enter(caller.namespace)
                except ResourceExhausted as shed:
                    limit = "server" if shed.subject == "server" else "tenant"
                    self._metrics.shed.labels(limit).inc()
                    self._usage.count(caller.namespace, f"shed:{limit}")
                    raise
                self._metrics.in_flight.inc()
                self._usage.count(caller.namespace, "calls:" + method.rsplit("/", 1)[-1])
                time_left = context.time_remaining()
                call = Call(caller, request_id, deadline_for(self._longest(method, context) or time_left))
                position.deadline = call.deadline
                call_token = CALL.set(call)
                position_token = CALL_POSITION.set(position)
                try:
                    yield outcome
                    if position.written and self._read_after is not None:
                        # The caller's next calls read this write, on whichever database answers.
                        sealed = self._read_after.token(caller.namespace, position.written, position.written_at)
                        context.set_trailing_metadata(((TOKEN_HEADER, sealed),))
                finally:
                    CALL.reset(call_token)
                    CALL_POSITION.reset(position_token)
                    self._admission.leave(caller.namespace)
                    self._metrics.in_flight.dec()
                    if position.answered_by:
                        outcome["database"] = position.answered_by
            except ServiceError as error:
                await abort_with(context, error)
            except Relayed as relayed:
                await context.abort(relayed.code, relayed.details, relayed.trailers)
            except (grpc.aio.AbortError, GeneratorExit, asyncio.CancelledError):
                raise
            except Exception:
                # A bug: logged here with its trace, and the caller told nothing of it.
                logger.exception("method=<%s> | unexpected error", method)
                await context.abort(grpc.StatusCode.INTERNAL, "internal error; the server log has the details")
            finally:
                code = _code(context)
                if code != "OK":
                    span.set_status(Status(StatusCode.ERROR, code))
                ended = time.perf_counter()
                seconds = ended - started
                self._metrics.observe_call(method, code, seconds)
                # The call waited on a busy loop: its time is not all its own.
                stall = self._lag.stall_during(started, ended)
                if stall >= NOTEWORTHY:
                    outcome["loop_stall_ms"] = round(stall * 1000, 1)
                log_call(
                    method=method,
                    code=code,
                    duration_ms=round(seconds * 1000, 3),
                    request_id=request_id,
                    namespace=caller.namespace if caller else None,
                    key_id=caller.key_id if caller else None,
                    peer=context.peer(),
                    trace_id=format(span.get_span_context().trace_id, "032x"),
                    **outcome,
                )

    def _longest(self, method: str, context: grpc.aio.ServicerContext) -> float | None:
        """The server's longest time for a call that set no deadline: none runs unbounded. None for a call
        with a deadline of its caller's, and for a stream (ended when it stops moving: `_within`)."""
        if context.time_remaining() is not None or method in STREAMING_METHODS:
            return None
        return self._limits.max_call_seconds

    async def _within(self, seconds: float, moving: Awaitable[Any], what: str) -> Any:
        """What `moving` gives (a stream's next request, or a written answer), or StreamIdle when
        it takes longer than `seconds`."""
        try:
            async with asyncio.timeout(seconds):
                return await moving
        except TimeoutError:
            self._metrics.idle_streams.inc()
            raise StreamIdle("STREAM_IDLE", f"the stream moved nothing for {seconds:g} s ({what}): ended") from None

    def _call_position(self, method: str, namespace: str, sent_token: str | None) -> CallPosition:
        """The call's position: how far its reads must see (the caller's token, opened for its namespace),
        and whether they may go to a read replica at all (a call that changes nothing)."""
        position = CallPosition(replicas_allowed=method in READ_ONLY_METHODS)
        if sent_token is not None and self._read_after is not None:
            opened = self._read_after.open(namespace, sent_token)
            if opened is None:
                raise InvalidArgument.of(
                    TOKEN_HEADER, "is not a read-after token of this namespace's: send the one a write returned"
                )
            position.read_after, position.read_after_at = opened
        return position

    def _admit(self, method: str, authorizations: list[str]) -> Caller:
        """The caller, if the call may go ahead: raises the status that says why not."""
        if not self._readiness.taking_calls:
            raise Starting("STARTING", "contextfold is starting: its database or model is not ready yet; retry")
        if not self._keys.required:
            return OPEN_CALLER
        if len(authorizations) > 1:
            raise Unauthenticated("API_KEY_AMBIGUOUS", "send one `authorization` header, not several")
        key = bearer_key(authorizations[0] if authorizations else "")
        if not key:
            raise Unauthenticated("API_KEY_REQUIRED", "an API key is required: send `authorization: Bearer <key>`")
        caller = self._keys.caller(key)
        if caller is None:
            raise Unauthenticated("API_KEY_INVALID", "the API key is not valid, or it was revoked")
        authorize(method, caller)
        return caller


def _decoding_requests(handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
    """`handler` taking bytes and decoding them itself: an undecodable request is INVALID_ARGUMENT."""
    decode = handler.request_deserializer
    if decode is None:
        return handler

    async def decoded(data: bytes, context: grpc.aio.ServicerContext) -> Any:
        try:
            return decode(data)
        except DecodeError as error:
            await abort_with(context, malformed(error))

    async def each_decoded(requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        async for data in requests:
            yield await decoded(data, context)

    serialize = handler.response_serializer
    if handler.unary_unary is not None:
        unary_unary = handler.unary_unary

        async def unary(data: bytes, context: grpc.aio.ServicerContext) -> Any:
            return await unary_unary(await decoded(data, context), context)

        return grpc.unary_unary_rpc_method_handler(unary, response_serializer=serialize)
    if handler.unary_stream is not None:
        unary_stream = handler.unary_stream

        async def unary_to_stream(data: bytes, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            answering = unary_stream(await decoded(data, context), context)
            if inspect.isawaitable(answering):
                # A servicer that writes its answers itself (`context.write`), as health's Watch does.
                await answering
                return
            async for response in answering:
                yield response

        return grpc.unary_stream_rpc_method_handler(unary_to_stream, response_serializer=serialize)
    if handler.stream_unary is not None:
        stream_unary = handler.stream_unary

        async def stream_to_unary(requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext) -> Any:
            return await stream_unary(each_decoded(requests, context), context)

        return grpc.stream_unary_rpc_method_handler(stream_to_unary, response_serializer=serialize)
    stream_stream = handler.stream_stream

    async def streams(requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        async for response in stream_stream(each_decoded(requests, context), context):
            yield response

    return grpc.stream_stream_rpc_method_handler(streams, response_serializer=serialize)


# Methods whose large requests are read shallowly before they are parsed.
_SHAPE_CHECKS = {INJECT: check_inject_shape}


def _injection_fields(report: injection_pb2.InjectionReport) -> dict[str, Any]:
    """What an `Inject` folded in, for its call's log line: sources injected and skipped, tokens."""
    return {
        "injected": [source.source for source in report.sources if source.injected],
        "skipped": {
            source.source: injection_pb2.SkipReason.Name(source.skip_reason)
            for source in report.sources
            if not source.injected
        },
        "tokens": report.total_tokens,
    }


_CODE_NAMES = {code.value[0]: code.name for code in grpc.StatusCode}


def _code(context: grpc.aio.ServicerContext) -> str:
    """The status the call ends with, by name."""
    code = context.code()
    if code is None:
        return "OK"
    if isinstance(code, grpc.StatusCode):
        return code.name
    return _CODE_NAMES.get(int(code), str(code))
