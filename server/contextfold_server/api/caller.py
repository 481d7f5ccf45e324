"""Who is calling: the namespace (tenant) and role a call acts with, set by the call pipeline."""

from __future__ import annotations

from contextvars import ContextVar

import grpc

from ..access.keys import OPEN_CALLER, Caller

CALLER: ContextVar[Caller] = ContextVar("caller", default=OPEN_CALLER)


def caller_namespace(context: grpc.aio.ServicerContext) -> str:
    """The namespace the call acts in: its key's, or `default` while the service is open."""
    return CALLER.get().namespace
