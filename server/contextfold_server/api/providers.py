"""`ProviderService`: which context providers `Inject` may call, and how."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import grpc
from contextfold.v1 import provider_pb2, provider_pb2_grpc

from ..customize.sandbox import Sandbox
from ..errors import InvalidArgument, PermissionDenied
from ..providers.egress import EgressDenied, EgressPolicy
from ..providers.registry import ProviderDirectory, ProviderRepository
from .caller import caller_namespace
from .checks import check_compiles, check_provider_name
from .convert import PROVIDER_FIELDS, RESERVED_SOURCES, provider_fields_from_proto, provider_to_proto
from .paging import PageTokens, page_size
from .status import reports_errors


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

    async def _checked_fields(
        self, provider: provider_pb2.Provider, paths: Collection[str], context: grpc.aio.ServicerContext
    ) -> dict[str, Any]:
        fields = provider_fields_from_proto(provider, paths)
        if "target" in fields:
            try:
                await self._policy.check(fields["target"], registering=True)
            except EgressDenied as denied:
                raise PermissionDenied("EGRESS_DENIED", f"provider.target: {denied}") from None
        await check_compiles(
            self._sandbox,
            [("trigger", fields.get("trigger_expression", ""), "provider.trigger_expression")],
            caller_namespace(context),
            context.time_remaining(),
            to_store=True,
        )
        return fields

    async def _changed(self, namespace: str) -> None:
        """Read-your-writes on this replica; the others hear of it by NOTIFY."""
        await self._directory.refresh(namespace)

    @reports_errors
    async def RegisterProvider(
        self, request: provider_pb2.RegisterProviderRequest, context: grpc.aio.ServicerContext
    ) -> provider_pb2.RegisterProviderResponse:
        namespace = caller_namespace(context)
        name = check_provider_name(request.provider.name, "provider.name", RESERVED_SOURCES)
        record = await self._repository.register(
            namespace, {"name": name, **await self._checked_fields(request.provider, PROVIDER_FIELDS, context)}
        )
        await self._changed(namespace)
        return provider_pb2.RegisterProviderResponse(provider=provider_to_proto(record))

    @reports_errors
    async def GetProvider(
        self, request: provider_pb2.GetProviderRequest, context: grpc.aio.ServicerContext
    ) -> provider_pb2.GetProviderResponse:
        check_provider_name(request.name, "name", RESERVED_SOURCES)
        record = await self._repository.get(caller_namespace(context), request.name)
        return provider_pb2.GetProviderResponse(provider=provider_to_proto(record))

    @reports_errors
    async def ListProviders(
        self, request: provider_pb2.ListProvidersRequest, context: grpc.aio.ServicerContext
    ) -> provider_pb2.ListProvidersResponse:
        limit = page_size(request.page_size)
        after = self._page_tokens.decode(
            request.page_token, lambda after: isinstance(after, list) and [type(v) for v in after] == [int, int]
        )
        records = await self._repository.page(caller_namespace(context), tuple(after) if after else None, limit + 1)
        providers, token = self._page_tokens.page(
            records, limit, provider_to_proto, lambda record: [record.priority, record.seq]
        )
        return provider_pb2.ListProvidersResponse(providers=providers, next_page_token=token)

    @reports_errors
    async def UpdateProvider(
        self, request: provider_pb2.UpdateProviderRequest, context: grpc.aio.ServicerContext
    ) -> provider_pb2.UpdateProviderResponse:
        namespace = caller_namespace(context)
        name = check_provider_name(request.provider.name, "provider.name", RESERVED_SOURCES)
        paths = set(request.update_mask.paths) or PROVIDER_FIELDS
        unknown = sorted(paths - PROVIDER_FIELDS)
        if unknown:
            raise InvalidArgument.of(
                "update_mask", f"cannot change {', '.join(unknown)}; it may name {', '.join(sorted(PROVIDER_FIELDS))}"
            )
        record = await self._repository.update(
            namespace, name, await self._checked_fields(request.provider, paths, context)
        )
        await self._changed(namespace)
        return provider_pb2.UpdateProviderResponse(provider=provider_to_proto(record))

    @reports_errors
    async def DeleteProvider(
        self, request: provider_pb2.DeleteProviderRequest, context: grpc.aio.ServicerContext
    ) -> provider_pb2.DeleteProviderResponse:
        namespace = caller_namespace(context)
        check_provider_name(request.name, "name", RESERVED_SOURCES)
        await self._repository.delete(namespace, request.name)
        await self._changed(namespace)
        return provider_pb2.DeleteProviderResponse()
