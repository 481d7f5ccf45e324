"""`InjectionService`: memory and provider context, folded into the conversation."""

from __future__ import annotations

from urllib.parse import quote

import grpc
from contextfold.v1 import injection_pb2, injection_pb2_grpc, provider_pb2

from ..customize.context import RequestCustomizer
from ..customize.sandbox import Sandbox
from ..engine.gate import SkipReason
from ..engine.injection import InjectionRequest, answer_budget, inject
from ..errors import Unavailable
from ..memory.search import MemorySearcher
from ..postgres.consistency import answered_by
from ..providers.fanout import ProviderChannels, provider_port
from ..providers.registry import ProviderDirectory
from ..tokens import count_tokens_off_the_loop
from .caller import CALLER, REQUEST_ID, caller_namespace, confined, deadline_after
from .checks import MAX_RESPONSE_BYTES, check_compiles, check_max_tokens, check_provider_names
from .convert import (
    RESERVED_SOURCES,
    check_inject_context,
    injected_block,
    memory_request_from_proto,
    report_to_proto,
    scope_from_proto,
    turns_from_messages,
)
from .status import reports_errors


class InjectionServicer(injection_pb2_grpc.InjectionServiceServicer):
    def __init__(
        self, searcher: MemorySearcher, directory: ProviderDirectory, channels: ProviderChannels, sandbox: Sandbox
    ) -> None:
        self._searcher = searcher
        self._directory = directory
        self._channels = channels
        self._sandbox = sandbox

    @reports_errors
    async def Inject(
        self, request: injection_pb2.InjectRequest, context: grpc.aio.ServicerContext
    ) -> injection_pb2.InjectResponse:
        # A malformed request is the caller's bug and gets INVALID_ARGUMENT; past
        # these checks, nothing fails the call: injection fails open.
        namespace = caller_namespace(context)
        # Admins are told why a provider failed in full (a dial error, say); agents in brief.
        reveal = CALLER.get().role == "admin"
        # Customizations run within the caller's time, less what answering takes.
        budget = answer_budget(context.time_remaining())
        deadline = deadline_after(budget)
        turns = turns_from_messages(request.messages)
        check_inject_context(request)
        memory = memory_request_from_proto(request)
        self._searcher.check_ranking(memory.ranking, "memory.ranking")
        await check_compiles(
            self._sandbox,
            [
                ("trigger", memory.trigger_expression, "trigger_expression"),
                ("query", memory.query_expression, "memory.query_expression"),
                ("format", memory.format_template, "memory.format_template"),
            ],
            namespace,
            # At most half the caller's time goes to checking: the rest is the sources'.
            None if budget is None else budget / 2,
            to_store=False,
        )
        scope = confined(scope_from_proto(request.memory.scope, "memory.scope"), "memory.scope")
        max_tokens = check_max_tokens(request.max_tokens, "max_tokens")
        check_provider_names(request.providers, "providers", RESERVED_SOURCES)
        try:
            providers, unknown = await self._directory.select(namespace, request.providers)
            missing = [(name, f"provider {name!r} is not registered") for name in unknown]
        except Unavailable as error:
            # Registrations this replica has not cached yet, and the database is down: fail open.
            providers = []
            missing = [(name, str(error)) for name in request.providers or ["providers"]]

        provide = provider_port(
            self._channels,
            {record.name: record.route() for record in providers},
            lambda: provider_pb2.ProvideRequest(
                messages=request.messages,
                app_state=request.app_state,
                agent=request.agent,
                namespace=namespace,
                request_id=REQUEST_ID.get(),
            ),
            # Metadata is ASCII: a namespace of other characters (older keys allowed them) is percent-encoded.
            (("x-request-id", REQUEST_ID.get()), ("x-contextfold-namespace", quote(namespace, safe="~._:@/+-"))),
        )
        outcome = await inject(
            turns,
            InjectionRequest(
                memory=memory,
                providers=tuple(record.spec() for record in providers),
                missing_providers=tuple(missing),
                max_tokens=max_tokens,
                coalesce=request.coalesce,
                time_left=context.time_remaining(),
            ),
            self._searcher.port(namespace, scope, deadline),
            provide,
            count_tokens_off_the_loop,
            RequestCustomizer(self._sandbox, request, turns, namespace, deadline),
        )

        # The response starts as the request's own messages: only the fold target gains blocks.
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
