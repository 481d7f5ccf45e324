"""`ProviderService`: which context providers `Inject` may call, and how."""

from __future__ import annotations

from typing import Any

import grpc
from contextfold.v1 import provider_pb2, provider_pb2_grpc

from ..customize.sandbox import Sandbox
from ..errors import PermissionDenied
from ..providers.egress import EgressDenied, EgressPolicy
from ..providers.registry import ProviderDirectory, ProviderRepository
from .call import CALL
from .paging import PageTokens, page_size
from .requests import (
    ProviderChange,
    check_compiles,
    parse_provider_name,
    parse_register_provider,
    parse_update_provider,
)
from .responses import provider_to_proto


class ProviderServicer(provider_pb2_grpc.ProviderServiceServicer):
    def __init__(
        self,
        repository: ProviderRepository,
        directory: ProviderDirectory,
        sandbox: Sandbox,
        page_tokens: PageTokens,
        policy: EgressPolicy,
    ) -> None:
        self._repository = repository
        self._policy = policy
        self._page_tokens = page_tokens
        self._directory = directory
        self._sandbox = sandbox

    async def _allowed(self, change: ProviderChange) -> dict[str, Any]:
        """The change's fields, once its target passes the egress policy and its trigger compiles."""
        call = CALL.get()
        if "target" in change.fields:
            try:
                await self._policy.check(change.fields["target"], registering=True)
            except EgressDenied as denied:
                raise PermissionDenied("EGRESS_DENIED", f"provider.target: {denied}") from None
        await check_compiles(self._sandbox, change.customizations, call.namespace, call.time_left(), to_store=True)
        return change.fields

    async def _changed(self, namespace: str) -> None:
        """Read-your-writes on this replica; the others hear of it by NOTIFY."""
        await self._directory.refresh(namespace)

    async def RegisterProvider(
        self, request: provider_pb2.RegisterProviderRequest, context: grpc.aio.ServicerContext
    ) -> provider_pb2.RegisterProviderResponse:
        namespace = CALL.get().namespace
        change = parse_register_provider(request)
        record = await self._repository.register(namespace, {"name": change.name, **await self._allowed(change)})
        await self._changed(namespace)
        return provider_pb2.RegisterProviderResponse(provider=provider_to_proto(record))

    async def GetProvider(
        self, request: provider_pb2.GetProviderRequest, context: grpc.aio.ServicerContext
    ) -> provider_pb2.GetProviderResponse:
        record = await self._repository.get(CALL.get().namespace, parse_provider_name(request.name))
        return provider_pb2.GetProviderResponse(provider=provider_to_proto(record))

    async def ListProviders(
        self, request: provider_pb2.ListProvidersRequest, context: grpc.aio.ServicerContext
    ) -> provider_pb2.ListProvidersResponse:
        limit = page_size(request.page_size)
        after = self._page_tokens.decode(
            request.page_token, lambda after: isinstance(after, list) and [type(v) for v in after] == [int, int]
        )
        records = await self._repository.page(CALL.get().namespace, tuple(after) if after else None, limit + 1)
        providers, token = self._page_tokens.page(
            records, limit, provider_to_proto, lambda record: [record.priority, record.seq]
        )
        return provider_pb2.ListProvidersResponse(providers=providers, next_page_token=token)

    async def UpdateProvider(
        self, request: provider_pb2.UpdateProviderRequest, context: grpc.aio.ServicerContext
    ) -> provider_pb2.UpdateProviderResponse:
        namespace = CALL.get().namespace
        change = parse_update_provider(request)
        record = await self._repository.update(namespace, change.name, await self._allowed(change))
        await self._changed(namespace)
        return provider_pb2.UpdateProviderResponse(provider=provider_to_proto(record))

    async def DeleteProvider(
        self, request: provider_pb2.DeleteProviderRequest, context: grpc.aio.ServicerContext
    ) -> provider_pb2.DeleteProviderResponse:
        namespace = CALL.get().namespace
        await self._repository.delete(namespace, parse_provider_name(request.name))
        await self._changed(namespace)
        return provider_pb2.DeleteProviderResponse()
