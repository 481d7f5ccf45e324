"""Whether this server takes calls: one state, told to health checks and to the call pipeline alike.

STARTING: listening, but the database or the model is not ready; health says
NOT_SERVING and calls are refused with UNAVAILABLE (reason STARTING), so a
client retries elsewhere. SERVING: calls are served. DRAINING: health says
NOT_SERVING so that balancers stop sending calls, and the calls that still
arrive are served until the server stops.

Health speaks for the whole server, not one worker: a balancer's probe reaches
one worker, but the connections it then sends may reach any. So a worker says
SERVING only while the supervisor says every worker serves (`all_serving`), and
one of them at least admits calls: while every worker is full, refusing calls at
its limit (admission.py), health says NOT_SERVING, and a balancer sends the calls
to another replica until one admits again.
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
        self._all_serving = False

    @property
    def taking_calls(self) -> bool:
        return self.state is not State.STARTING

    async def starting(self) -> None:
        self.state = State.STARTING
        await self._tell_health(health_pb2.HealthCheckResponse.NOT_SERVING)

    async def serving(self) -> None:
        self.state = State.SERVING
        await self._tell_health_the_state()

    async def all_serving(self, all_serving: bool) -> None:
        """What the supervisor says of every worker: whether they all serve."""
        self._all_serving = all_serving
        await self._tell_health_the_state()

    async def _tell_health_the_state(self) -> None:
        if self.state is not State.DRAINING:
            serving = self.state is State.SERVING and self._all_serving
            await self._tell_health(
                health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
            )

    async def draining(self) -> None:
        self.state = State.DRAINING
        await self._health.enter_graceful_shutdown()

    async def _tell_health(self, status: health_pb2.HealthCheckResponse.ServingStatus.ValueType) -> None:
        for name in self._services:
            await self._health.set(name, status)
