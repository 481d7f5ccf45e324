"""One place that turns service errors into gRPC statuses with details.

Callers get a status code, a sentence, and machine-readable details
(`google.rpc.BadRequest` naming each bad field, `ResourceInfo`, `ErrorInfo`),
never a stack trace. An unexpected error is logged here and reported as
INTERNAL without its text.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc
from google.rpc import status_pb2
from grpc_status import rpc_status

from ..errors import ServiceError

logger = logging.getLogger(__name__)

Handler = TypeVar("Handler", bound=Callable[..., Awaitable[Any]])


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


def reports_errors(handler: Handler) -> Handler:
    """Wrap a servicer method so that every error leaves as a well-formed status."""

    @functools.wraps(handler)
    async def wrapper(self: Any, request: Any, context: grpc.aio.ServicerContext) -> Any:
        try:
            return await handler(self, request, context)
        except ServiceError as error:
            await abort_with(context, error)
        except grpc.aio.AbortError:
            raise
        except Exception:
            logger.exception("method=<%s> | unexpected error", handler.__qualname__)
            await context.abort(grpc.StatusCode.INTERNAL, "internal error; the server log has the details")

    return wrapper  # type: ignore[return-value]
