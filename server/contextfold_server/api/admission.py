"""Which calls a worker takes now: a limit on the calls in flight, and each tenant's share of it.

A worker serves at most `max_in_flight` calls at once (past that, RESOURCE_EXHAUSTED rather than a
queue that grows without bound), and one namespace at most `per_tenant` of them: a tenant that
opens calls it never finishes (idle streams, say) holds its own share, never the others'. A call
past either limit is refused at once, with `QuotaFailure` naming what is at its limit and
`RetryInfo` saying when to try again: a slot frees as soon as any call of that tenant ends.

A worker that refused calls at its own limit does not admit until it is no longer full (`admitting`):
the worker tells its supervisor, and health says NOT_SERVING while no worker can (readiness.py).
"""

from __future__ import annotations

from collections import Counter

from ..errors import ResourceExhausted

# How soon a refused call may try again: calls end in milliseconds.
RETRY_AFTER = 0.1


class Admission:
    def __init__(self, max_in_flight: int, per_tenant: int) -> None:
        self.max_in_flight = max_in_flight
        self.per_tenant = min(max(1, per_tenant), max_in_flight)
        self.in_flight = 0
        self._by_tenant: Counter[str] = Counter()
        # Calls refused at the worker's limit since `cannot_admit` last looked.
        self._refused_full = 0

    def enter(self, namespace: str) -> None:
        """Take a slot for a call of `namespace`, or raise RESOURCE_EXHAUSTED saying which limit it is at."""
        if self.in_flight >= self.max_in_flight:
            self._refused_full += 1
            raise ResourceExhausted(
                "TOO_MANY_CALLS_IN_FLIGHT",
                f"the server is at its limit of {self.max_in_flight} calls in flight; retry with backoff",
                subject="server",
                retry_after=RETRY_AFTER,
            )
        if self._by_tenant[namespace] >= self.per_tenant:
            raise ResourceExhausted(
                "TENANT_CALLS_IN_FLIGHT",
                f"this namespace has {self.per_tenant} calls in flight, its share of this server's"
                f" {self.max_in_flight}; retry with backoff",
                subject=f"namespace:{namespace}",
                retry_after=RETRY_AFTER,
            )
        self.in_flight += 1
        self._by_tenant[namespace] += 1

    def admitting(self, before: bool) -> bool:
        """Whether the worker admits calls, at a look, given what the last look found (`before`): not once
        it refused calls at its limit since then; again once a look finds it not full."""
        refused, self._refused_full = self._refused_full, 0
        if refused:
            return False
        return before or self.in_flight < self.max_in_flight

    def leave(self, namespace: str) -> None:
        self.in_flight -= 1
        self._by_tenant[namespace] -= 1
        if not self._by_tenant[namespace]:
            del self._by_tenant[namespace]
