"""Service errors as gRPC statuses with details.

Callers get a status code, a sentence, and machine-readable details (`google.rpc.BadRequest`
naming each bad field, `ResourceInfo`, `ErrorInfo`), never a stack trace. The call pipeline
sends every call's error this way, in one place (`pipeline.py`); an unexpected error is logged
there and reported as INTERNAL without its text.
"""

from __future__ import annotations

import grpc
from google.rpc import status_pb2
from grpc_status import rpc_status

from ..errors import ServiceError


def to_status(error: ServiceError) -> status_pb2.Status:
    """The status `error` carries: its code, its sentence, and its details."""
    status = status_pb2.Status(code=error.code, message=str(error))
    for detail in error.details():
        packed = status.details.add()
        packed.Pack(detail)
    return status


async def abort_with(context: grpc.aio.ServicerContext, error: ServiceError) -> None:
    """End the call with `error`'s status and details."""
    await context.abort_with_status(rpc_status.to_status(to_status(error)))
