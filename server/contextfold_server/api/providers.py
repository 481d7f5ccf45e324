"""`ProviderService`: which context providers `Inject` may call, and how."""

from __future__ import annotations

import re
from typing import Any

import grpc
from contextfold.v1 import provider_pb2, provider_pb2_grpc

from ..engine.memory import MEMORY_SOURCE
from ..engine.region import COALESCED_SOURCE
from ..errors import InvalidArgument
from ..providers.registry import ProviderDirectory, ProviderRecord, ProviderRepository
from .caller import caller_namespace
from .convert import (
    check_max_tokens,
    decode_page_token,
    encode_page_token,
    page_size,
    trigger_expression_from_proto,
    trigger_from_proto,
    trigger_to_proto,
)
from .status import reports_errors

_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,62}")
_RESERVED = (MEMORY_SOURCE, COALESCED_SOURCE)
# host:port, [v6]:port, or a gRPC name-resolver URI (dns:, unix:, ipv4:, ipv6:).
_TARGET = re.compile(
    r"(?:(?:dns|unix|unix-abstract|ipv4|ipv6):\S{1,250}|(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]{1,253}):\d{1,5})"
)
DEFAULT_TIMEOUT_MS = 1000
MAX_TIMEOUT_MS = 30_000
_MASK_FIELDS = {"target", "trigger", "trigger_expression", "priority", "timeout", "max_tokens", "enabled"}


def check_provider_name(name: str, field: str) -> str:
    if not _NAME.fullmatch(name):
        raise InvalidArgument.of(field, "must be 1 to 63 letters, digits, '_' or '-', starting with a letter")
    if name in _RESERVED:
        raise InvalidArgument.of(field, f"{name!r} is reserved for contextfold's own blocks")
    return name


def _provider_fields(provider: provider_pb2.Provider, paths: set[str]) -> dict[str, Any]:
    """The stored columns for the named fields of `provider`, each checked."""
    fields: dict[str, Any] = {}
    if "target" in paths:
        port = provider.target.rsplit(":", 1)[-1]
        if not _TARGET.fullmatch(provider.target) or (port.isdigit() and not 0 < int(port) < 65536):
            raise InvalidArgument.of(
                "provider.target", "must be host:port, [ipv6]:port, or a dns:, unix:, ipv4: or ipv6: target"
            )
        fields["target"] = provider.target
    if "trigger" in paths:
        fields["trigger"] = trigger_from_proto(provider.trigger, "provider.trigger")
    if "trigger_expression" in paths:
        fields["trigger_expression"] = trigger_expression_from_proto(
            provider.trigger_expression, provider.trigger, "provider.trigger_expression", "provider.trigger"
        )
    if "priority" in paths:
        fields["priority"] = provider.priority
    if "timeout" in paths:
        timeout_ms = provider.timeout.ToMilliseconds() if provider.HasField("timeout") else DEFAULT_TIMEOUT_MS
        if not 1 <= timeout_ms <= MAX_TIMEOUT_MS:
            raise InvalidArgument.of("provider.timeout", f"must be from 1ms to {MAX_TIMEOUT_MS // 1000}s")
        fields["timeout_ms"] = timeout_ms
    if "max_tokens" in paths:
        fields["max_tokens"] = check_max_tokens(provider.max_tokens, "provider.max_tokens")
    if "enabled" in paths:
        fields["enabled"] = provider.enabled if provider.HasField("enabled") else True
    return fields


def provider_to_proto(record: ProviderRecord) -> provider_pb2.Provider:
    provider = provider_pb2.Provider(
        name=record.name,
        target=record.target,
        trigger=trigger_to_proto(record.trigger),
        trigger_expression=record.trigger_expression,
        priority=record.priority,
        max_tokens=record.max_tokens,
        enabled=record.enabled,
    )
    provider.timeout.FromMilliseconds(record.timeout_ms)
    provider.create_time.FromDatetime(record.create_time)
    provider.update_time.FromDatetime(record.update_time)
    return provider


class ProviderServicer(provider_pb2_grpc.ProviderServiceServicer):
    def __init__(self, repository: ProviderRepository, directory: ProviderDirectory) -> None:
        self._repository = repository
        self._directory = directory

    async def _changed(self, namespace: str) -> None:
        """Read-your-writes on this replica; the others hear of it by NOTIFY."""
        await self._directory.refresh(namespace)

    @reports_errors
    async def RegisterProvider(self, request: provider_pb2.RegisterProviderRequest, context: grpc.aio.ServicerContext):
        namespace = caller_namespace(context)
        name = check_provider_name(request.provider.name, "provider.name")
        record = await self._repository.register(
            namespace, {"name": name, **_provider_fields(request.provider, _MASK_FIELDS)}
        )
        await self._changed(namespace)
        return provider_pb2.RegisterProviderResponse(provider=provider_to_proto(record))

    @reports_errors
    async def GetProvider(self, request: provider_pb2.GetProviderRequest, context: grpc.aio.ServicerContext):
        check_provider_name(request.name, "name")
        record = await self._repository.get(caller_namespace(context), request.name)
        return provider_pb2.GetProviderResponse(provider=provider_to_proto(record))

    @reports_errors
    async def ListProviders(self, request: provider_pb2.ListProvidersRequest, context: grpc.aio.ServicerContext):
        limit = page_size(request.page_size)
        after = decode_page_token(
            request.page_token, lambda after: isinstance(after, list) and [type(v) for v in after] == [int, int]
        )
        records = await self._repository.list(caller_namespace(context), tuple(after) if after else None, limit + 1)
        response = provider_pb2.ListProvidersResponse(providers=[provider_to_proto(r) for r in records[:limit]])
        if len(records) > limit:
            last = records[limit - 1]
            response.next_page_token = encode_page_token([last.priority, last.seq])
        return response

    @reports_errors
    async def UpdateProvider(self, request: provider_pb2.UpdateProviderRequest, context: grpc.aio.ServicerContext):
        namespace = caller_namespace(context)
        name = check_provider_name(request.provider.name, "provider.name")
        paths = set(request.update_mask.paths) or _MASK_FIELDS
        unknown = sorted(paths - _MASK_FIELDS)
        if unknown:
            raise InvalidArgument.of(
                "update_mask", f"cannot change {', '.join(unknown)}; it may name {', '.join(sorted(_MASK_FIELDS))}"
            )
        record = await self._repository.update(namespace, name, _provider_fields(request.provider, paths))
        await self._changed(namespace)
        return provider_pb2.UpdateProviderResponse(provider=provider_to_proto(record))

    @reports_errors
    async def DeleteProvider(self, request: provider_pb2.DeleteProviderRequest, context: grpc.aio.ServicerContext):
        namespace = caller_namespace(context)
        check_provider_name(request.name, "name")
        await self._repository.delete(namespace, request.name)
        await self._changed(namespace)
        return provider_pb2.DeleteProviderResponse()
