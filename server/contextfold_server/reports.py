"""What a worker and its supervisor tell each other over the pipe between them, as typed messages.

A worker reports `Listening` (its port is open; NOT_SERVING yet), `Serving` (its dependencies
are ready), `Admitting` (whether it admits calls, or is full and refusing them), `Reaching`
(whether a database of its own answers: the primary or a replica) and `Reconnected` (its connections
were made good after `DatabaseRestarted`, and whether a database answers them). The supervisor
tells every worker `AllServing` (whether every worker serves and one at least admits calls, which
health speaks for), `DatabaseRestarted` (the embedded Postgres came back: replace the pool's connections
now, rather than each failing a call first) and `OwnPorts` (every port the server listens on, which
no provider may be). The pipe pickles them; both ends import them from here.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Listening:
    # The worker's own metrics, on loopback, for the supervisor's admin port to gather.
    metrics_port: int


@dataclass(frozen=True)
class Serving:
    embedder: str
    dimension: int


@dataclass(frozen=True)
class Admitting:
    admitting: bool


@dataclass(frozen=True)
class Reaching:
    # Whether a database of the worker's answers: the primary, or a replica (no longer, while none does).
    reaching: bool


@dataclass(frozen=True)
class Reconnected:
    # After `DatabaseRestarted`: the worker's pools were checked, a reconnection under way was tried at
    # once and ended, and whether a database of the worker's answers now.
    reaching: bool


@dataclass(frozen=True)
class AllServing:
    all_serving: bool


@dataclass(frozen=True)
class DatabaseRestarted:
    pass


@dataclass(frozen=True)
class OwnPorts:
    # Every port the server's processes listen on: the service's, the admin port, each worker's metrics.
    ports: tuple[int, ...]


WorkerReport = Listening | Serving | Admitting | Reaching | Reconnected
SupervisorWord = AllServing | DatabaseRestarted | OwnPorts
