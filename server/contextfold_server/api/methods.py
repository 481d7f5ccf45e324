"""contextfold's methods by what they are: which change nothing, which stream, and which are bulk work.

Read from the protos' descriptors where the contract says it (`idempotency_level`, streaming), and
named here where it is a decision of the server's: bulk work is what no model call waits on (adds,
imports, updates, Remember's writes, exports, erasures, listings), run by the bulk workers at a
lower CPU priority (`lanes.py`); everything else, Inject and SearchMemories first, is interactive.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from contextfold.v1 import injection_pb2, memory_pb2, provider_pb2
from google.protobuf import descriptor_pb2

INJECT = "/contextfold.v1.InjectionService/Inject"


def _methods_where(test: Callable[[Any], bool]) -> frozenset[str]:
    """The full names of contextfold's methods whose descriptor passes `test`."""
    return frozenset(
        f"/{service.full_name}/{method.name}"
        for file in (injection_pb2.DESCRIPTOR, memory_pb2.DESCRIPTOR, provider_pb2.DESCRIPTOR)
        for service in file.services_by_name.values()
        for method in service.methods
        if test(method)
    )


# Calls that change nothing, as the protos declare them (`idempotency_level = NO_SIDE_EFFECTS`): only
# their reads may go to a read replica. A write's reads are on the primary, which holds what it checks.
READ_ONLY_METHODS = _methods_where(
    lambda method: method.GetOptions().idempotency_level == descriptor_pb2.MethodOptions.NO_SIDE_EFFECTS
)
# Streams have no longest time: they are ended when they stop moving (`CallLimits.stream_idle_seconds`).
STREAMING_METHODS = _methods_where(lambda method: method.client_streaming or method.server_streaming)

# Work no model call waits on, whose size grows with the request or with what is stored: run by the bulk
# workers. Creating a store, reading one entry or its versions and listing stores stay interactive: each is
# one small statement, and a console or an agent's set-up waits on it.
BULK_METHODS = frozenset(
    f"/contextfold.v1.MemoryService/{name}"
    for name in (
        "AddMemories",
        "ImportMemories",
        "UpdateMemory",
        "Remember",
        "DeleteMemories",
        "DeleteStore",
        "EraseMemories",
        "ExportMemories",
        "ListMemories",
    )
)
assert _methods_where(lambda method: True) >= BULK_METHODS, "a bulk method the protos do not define"
# A stream is bulk work: its size is the caller's to grow. Workers forward streams, never serve them.
assert STREAMING_METHODS <= BULK_METHODS, "a stream that is not bulk work"
