"""`InjectionService`: memory and provider context, folded into the conversation."""

from __future__ import annotations

from urllib.parse import quote

import grpc
from contextfold.v1 import injection_pb2, injection_pb2_grpc, provider_pb2

from ..access.policy import sees_private_details
from ..customize.context import RequestCustomizer
from ..customize.sandbox import Sandbox
from ..engine.gate import SkipReason
from ..engine.injection import InjectionRequest, inject
from ..errors import Unavailable
from ..memory.search import MemorySearcher
from ..postgres.consistency import answered_by
from ..providers.fanout import ProviderChannels, provider_port
from ..providers.outcomes import INJECTED, ProviderOutcomes
from ..providers.registry import ProviderDirectory
from ..tokens import CallTokens
from ..turns import InTurns
from .call import CALL
from .fields import MAX_RESPONSE_BYTES
from .requests import Capabilities, check_compiles, parse_inject
from .responses import injected_block, report_to_proto

# A conversation of more content blocks than this is parsed on the worker's thread, in the caller's tenant's turns:
# 20,000 (the limit) take the event loop 10 ms as text, 40 to 80 ms as blocks injected earlier; a few hundred, well
# under a millisecond.
PARSED_ON_THE_LOOP = 2000


class InjectionServicer(injection_pb2_grpc.InjectionServiceServicer):
    def __init__(
        self,
        searcher: MemorySearcher,
        directory: ProviderDirectory,
        channels: ProviderChannels,
        sandbox: Sandbox,
        capabilities: Capabilities,
        outcomes: ProviderOutcomes,
    ) -> None:
        self._outcomes = outcomes
        self._searcher = searcher
        self._directory = directory
        self._channels = channels
        self._sandbox = sandbox
        self._capabilities = capabilities

    async def Inject(
        self, request: injection_pb2.InjectRequest, context: grpc.aio.ServicerContext
    ) -> injection_pb2.InjectResponse:
        # A malformed request is the caller's bug and gets INVALID_ARGUMENT; past the parse and
        # the compile check, nothing fails the call: injection fails open.
        call = CALL.get()
        off_the_loop = InTurns(call.namespace)
        if sum(len(message.content) for message in request.messages) <= PARSED_ON_THE_LOOP:
            parsed = parse_inject(request, call.caller, self._capabilities)
        else:
            parsed = await off_the_loop(parse_inject, request, call.caller, self._capabilities)
        budget = call.time_left()
        # At most half the caller's time goes to checking: the rest is the sources'.
        within = None if budget is None else budget / 2
        await check_compiles(self._sandbox, parsed.customizations, call.namespace, within, to_store=False)
        try:
            providers, unknown = await self._directory.select(call.namespace, list(parsed.providers))
            missing = [(name, f"provider {name!r} is not registered") for name in unknown]
        except Unavailable as error:
            # Registrations this replica has not cached yet, and the database is down: fail open.
            providers = []
            missing = [(name, str(error)) for name in parsed.providers or ["providers"]]

        provide = provider_port(
            self._channels,
            {record.name: record.route() for record in providers},
            lambda: provider_pb2.ProvideRequest(
                messages=request.messages,
                app_state=request.app_state,
                agent=request.agent,
                namespace=call.namespace,
                request_id=call.request_id,
            ),
            # Metadata is ASCII: a namespace of other characters (older keys allowed them) is percent-encoded.
            (("x-request-id", call.request_id), ("x-contextfold-namespace", quote(call.namespace, safe="~._:@/+-"))),
        )
        outcome = await inject(
            parsed.turns,
            InjectionRequest(
                memory=parsed.memory,
                providers=tuple(record.spec() for record in providers),
                missing_providers=tuple(missing),
                max_tokens=parsed.max_tokens,
                coalesce=parsed.coalesce,
                budget=call.time_left(),
            ),
            self._searcher.port(call.namespace, parsed.scope, call.deadline),
            provide,
            CallTokens(call.namespace),
            RequestCustomizer(self._sandbox, request, parsed.turns, call.namespace, call.deadline),
            off_the_loop,
        )

        registered = {record.name for record in providers}
        for source in outcome.sources[1:]:
            if source.source in registered:
                kind = INJECTED if source.injected or source.skip_reason is None else source.skip_reason.value
                self._outcomes.count(call.namespace, source.source, kind, source.private_detail or source.detail)

        # The response starts as the request's own messages: only the fold target gains blocks.
        reveal = sees_private_details(call.caller)
        response = injection_pb2.InjectResponse(messages=request.messages, report=report_to_proto(outcome, reveal))
        if outcome.blocks:
            response.messages[outcome.target_index].content.extend(injected_block(b) for b in outcome.blocks)
            if response.ByteSize() > MAX_RESPONSE_BYTES:
                # Folded, the messages would not fit a response a client takes: fail open.
                outcome.leave_all_out(
                    SkipReason.OVER_BUDGET,
                    f"the folded messages would pass the {MAX_RESPONSE_BYTES} bytes of a response",
                )
                report = report_to_proto(outcome, reveal)
                response = injection_pb2.InjectResponse(messages=request.messages, report=report)
        response.report.database = answered_by()
        return response
