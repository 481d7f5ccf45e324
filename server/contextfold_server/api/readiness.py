"""Whether this server takes calls: one state, told to health checks and to the call pipeline alike.

STARTING: listening, but the database or the model is not ready; health says
NOT_SERVING and calls are refused with UNAVAILABLE (reason STARTING), so a
client retries elsewhere. SERVING: health says so, calls are served. DRAINING:
health says NOT_SERVING so that balancers stop sending calls, and the calls
that still arrive are served until the server stops.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum

from grpc_health.v1 import health, health_pb2


class State(Enum):
    STARTING = "starting"
    SERVING = "serving"
    DRAINING = "draining"


class Readiness:
    def __init__(self, health_servicer: health.aio.HealthServicer, services: Sequence[str]) -> None:
        self._health = health_servicer
        self._services = ("", *services)
        self.state = State.STARTING

    @property
    def taking_calls(self) -> bool:
        return self.state is not State.STARTING

    async def starting(self) -> None:
        self.state = State.STARTING
        await self._tell_health(health_pb2.HealthCheckResponse.NOT_SERVING)

    async def serving(self) -> None:
        self.state = State.SERVING
        await self._tell_health(health_pb2.HealthCheckResponse.SERVING)

    async def draining(self) -> None:
        self.state = State.DRAINING
        await self._health.enter_graceful_shutdown()

    async def _tell_health(self, status: health_pb2.HealthCheckResponse.ServingStatus.ValueType) -> None:
        for name in self._services:
            await self._health.set(name, status)
