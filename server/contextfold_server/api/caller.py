"""Who is calling: the namespace (tenant) and role a call acts with, set by the call pipeline, and
the scope a key bound to one confines the call to."""

from __future__ import annotations

import asyncio
from contextvars import ContextVar

import grpc

from ..access.keys import OPEN_CALLER, Caller
from ..engine.injection import answer_budget
from ..errors import PermissionDenied
from ..memory.store import Scope

CALLER: ContextVar[Caller] = ContextVar("caller", default=OPEN_CALLER)
# The call's request id (the caller's `x-request-id`, or one the pipeline made).
REQUEST_ID: ContextVar[str] = ContextVar("request_id", default="")


def caller_namespace(context: grpc.aio.ServicerContext) -> str:
    """The namespace the call acts in: its key's, or the open namespace when the service runs open."""
    return CALLER.get().namespace


def confined(scope: Scope, field: str) -> Scope:
    """`scope` (at `field` in the request) within the scope the caller's key is bound to: a bound
    field the request leaves empty takes the key's value; one that names another is refused."""
    caller = CALLER.get()
    bound = {"user_id": caller.user_id, "agent_id": caller.agent_id}
    values = {"user_id": scope.user_id, "agent_id": scope.agent_id}
    for name, value in bound.items():
        if value and values[name] not in ("", value):
            raise PermissionDenied(
                "SCOPE_BOUND_KEY",
                f"{field}.{name}: this key is bound to another {name}; leave it empty or name its own",
            )
        values[name] = value or values[name]
    return Scope(user_id=values["user_id"], agent_id=values["agent_id"], session_id=scope.session_id)


def key_scope() -> Scope:
    """The scope the caller's key is bound to (empty for a key bound to none): what a call naming no
    scope, such as a get or a delete by id, is confined to."""
    caller = CALLER.get()
    return Scope(user_id=caller.user_id, agent_id=caller.agent_id)


def deadline_of(context: grpc.aio.ServicerContext) -> float | None:
    """When the call's own work must be done, on the event loop's clock: its deadline less the
    reserve answering takes (`answer_budget`); None when the caller set no deadline."""
    return deadline_after(answer_budget(context.time_remaining()))


def deadline_after(budget: float | None) -> float | None:
    """The event loop's time `budget` seconds from now; None without a budget."""
    return None if budget is None else asyncio.get_running_loop().time() + budget
