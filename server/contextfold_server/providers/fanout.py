"""Calling providers: pooled channels, one serialized context, and failures put in words.

Channels are dialled once per target and reused by every call. The request
carries the same context to every provider, so it is serialized once and only
the provider's own name is appended per call (protobuf merges concatenated
messages).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Iterable

import grpc
from contextfold.v1 import provider_pb2
from google.protobuf.message import DecodeError
from opentelemetry.trace import SpanKind, Status, StatusCode

from ..engine.injection import ProviderSpec, ProvideText
from ..engine.outcome import SourceFailed
from ..observe.tracing import metadata_for_call, span
from .egress import DENIED, EgressDenied, EgressPolicy, parse_target

PROVIDE_METHOD = "/contextfold.v1.ContextProvider/Provide"

# A provider's answer is text for a prompt; anything larger is a fault, and
# refusing it here keeps one provider from ballooning the server's memory.
MAX_RESPONSE_BYTES = 1024 * 1024

_CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", MAX_RESPONSE_BYTES),
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_permit_without_calls", 0),
]


class ProviderChannels:
    """A channel per registered target, to the addresses the egress policy checked it resolves to,
    opened on first use and kept; a target whose addresses change gets a new channel."""

    def __init__(self, policy: EgressPolicy) -> None:
        self.policy = policy
        # Each target's dial target (the checked addresses) and its channel and method.
        self._channels: dict[str, tuple[str, grpc.aio.Channel, grpc.aio.UnaryUnaryMultiCallable]] = {}
        self._closing: set[asyncio.Task[None]] = set()

    async def provide_method(self, target: str) -> tuple[grpc.aio.UnaryUnaryMultiCallable, grpc.aio.Channel]:
        """The Provide method for `target`, dialled where the policy allows now; `EgressDenied` if not."""
        dial = await self.policy.check(target)
        kept = self._channels.get(target)
        if kept is not None and kept[0] == dial:
            return kept[2], kept[1]
        if kept is not None:
            self._close_later(kept[1])
        options: list[tuple[str, int | str]] = list(_CHANNEL_OPTIONS)
        if not dial.startswith("unix:"):
            # The channel dials the checked addresses; its calls still name the host they are for.
            options.append(("grpc.default_authority", parse_target(target).authority))
        channel = grpc.aio.insecure_channel(dial, options=options)
        # Bytes both ways: the request arrives serialized, and the response is
        # parsed here, where a malformed one can be named as such.
        method = channel.unary_unary(PROVIDE_METHOD, request_serializer=None, response_deserializer=None)
        self._channels[target] = (dial, channel, method)
        return method, channel

    async def keep_only(self, targets: Iterable[str]) -> None:
        """Close the channels of targets no registration uses any more."""
        wanted = set(targets)
        for target in [target for target in self._channels if target not in wanted]:
            await self._channels.pop(target)[1].close()

    def _close_later(self, channel: grpc.aio.Channel) -> None:
        task = asyncio.get_running_loop().create_task(channel.close(grace=5.0))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def close(self) -> None:
        await asyncio.gather(*self._closing, *(channel.close() for _, channel, _ in self._channels.values()))
        self._channels.clear()


def provider_port(
    channels: ProviderChannels,
    targets: dict[str, str],
    context: Callable[[], provider_pb2.ProvideRequest],
    caller_metadata: tuple[tuple[str, str], ...],
) -> ProvideText:
    """The engine's `ProvideText` port for one `Inject` call. The context is built on the first
    provider call, so an injection that asks no provider never copies the conversation; each call
    carries `caller_metadata` (who asks, the request id) besides the trace context."""

    @functools.cache
    def serialized_context() -> bytes:
        return context().SerializeToString()

    async def provide(spec: ProviderSpec, timeout: float) -> str:
        target = targets[spec.name]
        try:
            method, channel = await channels.provide_method(target)
        except EgressDenied as denied:
            raise SourceFailed(DENIED, f"{DENIED}: {denied}") from None
        request = serialized_context() + provider_pb2.ProvideRequest(provider=spec.name).SerializeToString()
        with span(f"contextfold.provider {spec.name}", SpanKind.CLIENT, provider=spec.name) as current:
            try:
                # The provider joins the caller's trace: this span is its parent.
                answer = await method(request, timeout=timeout, metadata=(*metadata_for_call(), *caller_metadata))
            except grpc.aio.AioRpcError as error:
                current.set_status(Status(StatusCode.ERROR, error.code().name))
                if error.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                    raise TimeoutError from error
                answered = channel.get_state() == grpc.ChannelConnectivity.READY
                raise _failure(error, answered) from error
        try:
            return provider_pb2.ProvideResponse.FromString(answer).text
        except DecodeError as error:
            raise SourceFailed(f"malformed response: {len(answer)} bytes that are not a ProvideResponse") from error

    return provide


def _failure(error: grpc.aio.AioRpcError, answered: bool) -> SourceFailed:
    """A failed call: the status the provider `answered` with, as it said it; or, when it could not be
    reached, `unreachable` (the dial error, which could map the network, goes to the log and admins)."""
    described = describe_failure(error, answered)
    if described.startswith("unreachable"):
        return SourceFailed("unreachable", described)
    return SourceFailed(described)


def describe_failure(error: grpc.aio.AioRpcError, answered: bool) -> str:
    """A failed call in words: the status the provider `answered` with, or why it could not answer."""
    code, details = error.code(), error.details() or ""
    if code == grpc.StatusCode.UNAVAILABLE and not answered:
        return f"unreachable: {details}"
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED and "message larger than max" in details.lower():
        return f"response over {MAX_RESPONSE_BYTES} bytes: {details}"
    return f"status {code.name}: {details}"
