"""`InjectionService`: memory context injection over the wire."""

from __future__ import annotations

import logging

import grpc
from contextfold.v1 import injection_pb2, injection_pb2_grpc

from ..engine.injection import MEMORY_SOURCE, inject_memory
from ..memory.search import MemorySearcher
from .caller import caller_namespace
from .convert import injected_block, memory_request_from_proto, report_to_proto, scope_from_proto, turns_from_messages
from .status import reports_errors

logger = logging.getLogger(__name__)


class InjectionServicer(injection_pb2_grpc.InjectionServiceServicer):
    def __init__(self, searcher: MemorySearcher) -> None:
        self._searcher = searcher

    @reports_errors
    async def Inject(self, request: injection_pb2.InjectRequest, context: grpc.aio.ServicerContext):
        # A malformed request is the caller's bug and gets INVALID_ARGUMENT; past
        # these checks, nothing fails the call: injection fails open.
        turns = turns_from_messages(request.messages)
        memory_request = memory_request_from_proto(request)
        search = self._searcher.port(caller_namespace(context), scope_from_proto(request.memory.scope, "memory.scope"))
        outcome = await inject_memory(turns, memory_request, search)

        # The response starts as the request's own messages: only the fold target gains a block.
        response = injection_pb2.InjectResponse(messages=request.messages, report=report_to_proto(outcome))
        if outcome.fold is not None:
            response.messages[outcome.fold.target_index].content.append(injected_block(MEMORY_SOURCE, outcome))
        logger.info(
            "injected=<%s> reason=<%s> entries=<%d> total_ms=<%.1f> | inject",
            outcome.injected,
            outcome.skip_reason.value if outcome.skip_reason else "",
            len(outcome.entries),
            outcome.durations.get("total", 0.0) * 1000,
        )
        return response
