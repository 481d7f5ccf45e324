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
from dataclasses import dataclass, field

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


@dataclass(frozen=True)
class TlsSettings:
    """TLS towards a provider: the CAs to verify it with (empty: the system's), contextfold's
    certificate and key for mutual TLS (or neither), and the name to verify (empty: the host)."""

    ca: str = ""
    cert: str = ""
    key: str = field(default="", repr=False)
    server_name: str = ""


@dataclass(frozen=True)
class Route:
    """How to reach a provider: its target, TLS or plaintext, and a header to send with each call."""

    target: str
    tls: TlsSettings | None = None
    credential: tuple[str, str] | None = field(default=None, repr=False)


class ProviderChannels:
    """A channel per route, to the addresses the egress policy checked its target resolves to,
    opened on first use and kept; a target whose addresses change gets a new channel."""

    def __init__(self, policy: EgressPolicy) -> None:
        self.policy = policy
        # Each route's dial target (the checked addresses) and its channel and method.
        self._channels: dict[Route, tuple[str, grpc.aio.Channel, grpc.aio.UnaryUnaryMultiCallable]] = {}
        self._closing: set[asyncio.Task[None]] = set()

    async def provide_method(self, route: Route) -> tuple[grpc.aio.UnaryUnaryMultiCallable, grpc.aio.Channel]:
        """The Provide method for `route`, dialled where the policy allows now; `EgressDenied` if not."""
        dial = await self.policy.check(route.target)
        kept = self._channels.get(route)
        if kept is not None and kept[0] == dial:
            return kept[2], kept[1]
        if kept is not None:
            self._close_later(kept[1])
        channel = _channel(route, dial)
        # Bytes both ways: the request arrives serialized, and the response is
        # parsed here, where a malformed one can be named as such.
        method = channel.unary_unary(PROVIDE_METHOD, request_serializer=None, response_deserializer=None)
        self._channels[route] = (dial, channel, method)
        return method, channel

    async def keep_only(self, routes: Iterable[Route]) -> None:
        """Close the channels of routes no registration uses any more."""
        wanted = set(routes)
        for route in [route for route in self._channels if route not in wanted]:
            await self._channels.pop(route)[1].close()

    def _close_later(self, channel: grpc.aio.Channel) -> None:
        task = asyncio.get_running_loop().create_task(channel.close(grace=5.0))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def close(self) -> None:
        await asyncio.gather(*self._closing, *(channel.close() for _, channel, _ in self._channels.values()))
        self._channels.clear()


def _channel(route: Route, dial: str) -> grpc.aio.Channel:
    """A channel to the checked `dial` target; its calls still name (and TLS verifies) the host they are for."""
    options: list[tuple[str, int | str]] = list(_CHANNEL_OPTIONS)
    endpoint = parse_target(route.target)
    host = endpoint.host
    if host:
        options.append(("grpc.default_authority", endpoint.authority))
    if route.tls is None:
        return grpc.aio.insecure_channel(dial, options=options)
    name = route.tls.server_name or host
    if name:
        options.append(("grpc.ssl_target_name_override", name))
    credentials = grpc.ssl_channel_credentials(
        root_certificates=route.tls.ca.encode() or None,
        private_key=route.tls.key.encode() or None,
        certificate_chain=route.tls.cert.encode() or None,
    )
    return grpc.aio.secure_channel(dial, credentials, options=options)


def provider_port(
    channels: ProviderChannels,
    routes: dict[str, Route],
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
        route = routes[spec.name]
        try:
            method, channel = await channels.provide_method(route)
        except EgressDenied as denied:
            raise SourceFailed(DENIED, f"{DENIED}: {denied}") from None
        request = serialized_context() + provider_pb2.ProvideRequest(provider=spec.name).SerializeToString()
        with span(f"contextfold.provider {spec.name}", SpanKind.CLIENT, provider=spec.name) as current:
            try:
                # The provider joins the caller's trace: this span is its parent.
                metadata = (*metadata_for_call(), *caller_metadata, *((route.credential,) if route.credential else ()))
                answer = await method(request, timeout=timeout, metadata=metadata)
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
