"""Errors from the service, as exceptions that carry the status and its details.

One place maps every gRPC status to an exception class, so callers can catch
`NotFound` or `InvalidArgument` rather than compare codes, and read which
field was wrong from `field_violations`.
"""

from __future__ import annotations

import grpc

from ._rpc_status import decode_details

_STATUS_DETAILS_KEY = "grpc-status-details-bin"


class ContextfoldError(Exception):
    """A call to contextfold failed. `code` is the gRPC status; `details` the decoded `google.rpc` details."""

    code: grpc.StatusCode = grpc.StatusCode.UNKNOWN

    def __init__(self, message: str, *, code: grpc.StatusCode | None = None, details: list | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.details = details or []

    @property
    def field_violations(self) -> list[tuple[str, str]]:
        """`(field, description)` for each bad field named by a `BadRequest` detail."""
        return [
            (violation.field, violation.description)
            for detail in self.details
            if type(detail).__name__ == "BadRequest"
            for violation in detail.field_violations
        ]

    @property
    def reason(self) -> str | None:
        """The machine-readable cause (`google.rpc.ErrorInfo.reason`), e.g. `API_KEY_INVALID`."""
        return next((d.reason for d in self.details if type(d).__name__ == "ErrorInfo"), None)

    @property
    def resource(self) -> tuple[str, str] | None:
        """`(type, name)` of the resource the error is about (`google.rpc.ResourceInfo`)."""
        return next(
            ((d.resource_type, d.resource_name) for d in self.details if type(d).__name__ == "ResourceInfo"), None
        )

    def __str__(self) -> str:
        """The status and the sentence, then what the details say, decoded: `INVALID_ARGUMENT: … (query: …)`."""
        said = [f"reason: {self.reason}"] if self.reason else []
        if self.resource is not None:
            said.append(f"resource: {' '.join(self.resource)}")
        said += [f"{field}: {description}" for field, description in self.field_violations]
        return f"{self.code.name}: {self.message}" + (f" ({'; '.join(said)})" if said else "")


class InvalidApiKey(ContextfoldError, ValueError):
    """The API key given cannot be sent (`keys.checked_key`): refused by the client, before any call."""

    def __str__(self) -> str:
        return self.message


class InvalidArgument(ContextfoldError):
    code = grpc.StatusCode.INVALID_ARGUMENT


class NotFound(ContextfoldError):
    code = grpc.StatusCode.NOT_FOUND


class AlreadyExists(ContextfoldError):
    code = grpc.StatusCode.ALREADY_EXISTS


class FailedPrecondition(ContextfoldError):
    code = grpc.StatusCode.FAILED_PRECONDITION


class PermissionDenied(ContextfoldError):
    code = grpc.StatusCode.PERMISSION_DENIED


class Unauthenticated(ContextfoldError):
    code = grpc.StatusCode.UNAUTHENTICATED


class Aborted(ContextfoldError):
    """A write lost to another (a stale etag): read the entry again and retry."""

    code = grpc.StatusCode.ABORTED


class ResourceExhausted(ContextfoldError):
    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class Unavailable(ContextfoldError):
    code = grpc.StatusCode.UNAVAILABLE


class DeadlineExceeded(ContextfoldError):
    code = grpc.StatusCode.DEADLINE_EXCEEDED


class Internal(ContextfoldError):
    code = grpc.StatusCode.INTERNAL


_BY_CODE = {
    cls.code: cls
    for cls in (
        InvalidArgument,
        NotFound,
        AlreadyExists,
        FailedPrecondition,
        Aborted,
        PermissionDenied,
        Unauthenticated,
        ResourceExhausted,
        Unavailable,
        DeadlineExceeded,
        Internal,
    )
}


def from_rpc_error(error: grpc.RpcError) -> ContextfoldError:
    """The exception for a failed call, with its `google.rpc.Status` details decoded."""
    code = error.code()
    details: list = []
    for key, value in error.trailing_metadata() or ():
        if key == _STATUS_DETAILS_KEY:
            details = decode_details(value)
    cls = _BY_CODE.get(code, ContextfoldError)
    return cls(error.details() or code.name, code=code, details=details)
