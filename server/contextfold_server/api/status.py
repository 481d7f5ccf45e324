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
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from ..errors import (
    AlreadyExists,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
    ServiceError,
    Starting,
    Unauthenticated,
    Unavailable,
)

logger = logging.getLogger(__name__)

DOMAIN = "contextfold.dev"

Handler = TypeVar("Handler", bound=Callable[..., Awaitable[Any]])


def _pack(message) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(message)
    return packed


def to_status(error: ServiceError) -> status_pb2.Status:
    status = status_pb2.Status(message=str(error))
    if isinstance(error, InvalidArgument):
        status.code = code_pb2.INVALID_ARGUMENT
        status.details.append(
            _pack(
                error_details_pb2.BadRequest(
                    field_violations=[
                        error_details_pb2.BadRequest.FieldViolation(field=v.field, description=v.description)
                        for v in error.violations
                    ]
                )
            )
        )
    elif isinstance(error, NotFound | AlreadyExists):
        status.code = code_pb2.NOT_FOUND if isinstance(error, NotFound) else code_pb2.ALREADY_EXISTS
        status.details.append(
            _pack(
                error_details_pb2.ResourceInfo(
                    resource_type=error.resource_type, resource_name=error.name, description=str(error)
                )
            )
        )
    elif isinstance(error, FailedPrecondition):
        status.code = code_pb2.FAILED_PRECONDITION
    elif isinstance(error, Unavailable):
        status.code = code_pb2.UNAVAILABLE
        status.details.append(_pack(error_details_pb2.ErrorInfo(reason="DEPENDENCY_UNAVAILABLE", domain=DOMAIN)))
    elif isinstance(error, Unauthenticated | PermissionDenied | ResourceExhausted | Starting):
        status.code = {
            Unauthenticated: code_pb2.UNAUTHENTICATED,
            PermissionDenied: code_pb2.PERMISSION_DENIED,
            ResourceExhausted: code_pb2.RESOURCE_EXHAUSTED,
            Starting: code_pb2.UNAVAILABLE,
        }[type(error)]
        status.details.append(_pack(error_details_pb2.ErrorInfo(reason=error.reason, domain=DOMAIN)))
    else:
        status.code = code_pb2.INTERNAL
    return status


async def abort_with(context: grpc.aio.ServicerContext, error: ServiceError) -> None:
    """End the call with `error`'s status and details."""
    await context.abort_with_status(rpc_status.to_status(to_status(error)))


def reports_errors(handler: Handler) -> Handler:
    """Wrap a servicer method so that every error leaves as a well-formed status."""

    @functools.wraps(handler)
    async def wrapper(self, request, context: grpc.aio.ServicerContext):
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
