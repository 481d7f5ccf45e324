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
    """One channel per registered target, opened on first use and kept."""

    def __init__(self) -> None:
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._methods: dict[str, grpc.aio.UnaryUnaryMultiCallable] = {}

    def provide_method(self, target: str) -> grpc.aio.UnaryUnaryMultiCallable:
        method = self._methods.get(target)
        if method is None:
            channel = grpc.aio.insecure_channel(target, options=_CHANNEL_OPTIONS)
            self._channels[target] = channel
            # Bytes both ways: the request arrives serialized, and the response is
            # parsed here, where a malformed one can be named as such.
            method = channel.unary_unary(PROVIDE_METHOD, request_serializer=None, response_deserializer=None)
            self._methods[target] = method
        return method

    def connected(self, target: str) -> bool:
        """Whether the channel to `target` is connected: a status that came back on it is the provider's."""
        channel = self._channels.get(target)
        return channel is not None and channel.get_state() == grpc.ChannelConnectivity.READY

    async def keep_only(self, targets: Iterable[str]) -> None:
        """Close the channels of targets no registration uses any more."""
        wanted = set(targets)
        for target in [target for target in self._channels if target not in wanted]:
            self._methods.pop(target)
            await self._channels.pop(target).close()

    async def close(self) -> None:
        await asyncio.gather(*(channel.close() for channel in self._channels.values()))
        self._channels.clear()
        self._methods.clear()


def provider_port(
    channels: ProviderChannels, targets: dict[str, str], context: Callable[[], provider_pb2.ProvideRequest]
) -> ProvideText:
    """The engine's `ProvideText` port for one `Inject` call. The context is built on the first
    provider call, so an injection that asks no provider never copies the conversation."""

    @functools.cache
    def serialized_context() -> bytes:
        return context().SerializeToString()

    async def provide(spec: ProviderSpec, timeout: float) -> str:
        target = targets[spec.name]
        method = channels.provide_method(target)
        request = serialized_context() + provider_pb2.ProvideRequest(provider=spec.name).SerializeToString()
        with span(f"contextfold.provider {spec.name}", SpanKind.CLIENT, provider=spec.name) as current:
            try:
                # The provider joins the caller's trace: this span is its parent.
                answer = await method(request, timeout=timeout, metadata=metadata_for_call())
            except grpc.aio.AioRpcError as error:
                current.set_status(Status(StatusCode.ERROR, error.code().name))
                if error.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                    raise TimeoutError from error
                raise SourceFailed(describe_failure(error, answered=channels.connected(target))) from error
        try:
            return provider_pb2.ProvideResponse.FromString(answer).text
        except DecodeError as error:
            raise SourceFailed(f"malformed response: {len(answer)} bytes that are not a ProvideResponse") from error

    return provide


def describe_failure(error: grpc.aio.AioRpcError, answered: bool) -> str:
    """A failed call in words: the status the provider `answered` with, or why it could not answer."""
    code, details = error.code(), error.details() or ""
    if code == grpc.StatusCode.UNAVAILABLE and not answered:
        return f"unreachable: {details}"
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED and "message larger than max" in details.lower():
        return f"response over {MAX_RESPONSE_BYTES} bytes: {details}"
    return f"status {code.name}: {details}"
