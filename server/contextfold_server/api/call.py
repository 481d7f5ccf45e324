"""One call as the servicers see it: who makes it, its request id, and when its own work must be done.

The call pipeline makes the `Call` once, as it admits the call, and sets it for the servicer
(`CALL`); whatever the call does after (its sources, its customizations, its reranker) reads
its time from `deadline`, never from the gRPC context again.
"""

from __future__ import annotations

import asyncio
from contextvars import ContextVar
from dataclasses import dataclass

from ..access.keys import OPEN_CALLER, Caller

# Time kept back from the caller's deadline to build and send the answer, so a
# source that runs out the clock still leaves room for a fail-open reply, also on
# a busy machine: a tenth of the caller's time, and at least 50 ms.
_ANSWER_RESERVE = 0.05
_ANSWER_RESERVE_SHARE = 0.1


@dataclass(frozen=True)
class CallLimits:
    """How long a call may take when its caller says nothing: a unary call that set no deadline gets
    `max_call_seconds`; a stream is ended once it moves nothing (no request comes, no answer is read)
    for `stream_idle_seconds`."""

    max_call_seconds: float = 60.0
    stream_idle_seconds: float = 30.0


@dataclass(frozen=True)
class Call:
    caller: Caller
    # The caller's `x-request-id`, or one the pipeline made.
    request_id: str = ""
    # When the call's own work must be done, on the event loop's clock: the caller's deadline less the
    # reserve answering takes. None when the caller set no deadline.
    deadline: float | None = None

    @property
    def namespace(self) -> str:
        """The namespace the call acts in: its key's, or the open namespace when the service runs open."""
        return self.caller.namespace

    def time_left(self) -> float | None:
        """Seconds left for the call's own work (never negative); None without a deadline."""
        if self.deadline is None:
            return None
        return max(0.0, self.deadline - asyncio.get_running_loop().time())


# Outside calls (background work): the open caller, with no deadline. A `Call` is frozen.
CALL: ContextVar[Call] = ContextVar("call", default=Call(OPEN_CALLER))  # noqa: B039


def deadline_for(time_remaining: float | None) -> float | None:
    """The deadline of a call with `time_remaining` seconds before its caller gives up (None: it set no
    deadline), on the event loop's clock, less the reserve answering takes."""
    if time_remaining is None:
        return None
    budget = max(0.0, time_remaining - max(_ANSWER_RESERVE, time_remaining * _ANSWER_RESERVE_SHARE))
    return asyncio.get_running_loop().time() + budget
