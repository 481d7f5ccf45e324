"""Errors the service reports to callers, independent of the transport.

Adapters and servicers raise these; `api.status` maps each to one gRPC status
with machine-readable details. Anything else that escapes a call is a bug.
"""

from __future__ import annotations

from dataclasses import dataclass


class ServiceError(Exception):
    """An error whose message is safe and useful to show the caller."""


@dataclass
class FieldViolation:
    field: str
    description: str


class InvalidArgument(ServiceError):
    """A request field is malformed; names every offending field and why."""

    def __init__(self, *violations: FieldViolation) -> None:
        self.violations = list(violations)
        super().__init__("; ".join(f"{v.field}: {v.description}" for v in self.violations))

    @classmethod
    def of(cls, field: str, description: str) -> InvalidArgument:
        return cls(FieldViolation(field, description))


class NotFound(ServiceError):
    def __init__(self, resource_type: str, name: str, description: str = "") -> None:
        self.resource_type = resource_type
        self.name = name
        super().__init__(description or f"{resource_type} {name!r} does not exist")


class AlreadyExists(ServiceError):
    def __init__(self, resource_type: str, name: str, description: str = "") -> None:
        self.resource_type = resource_type
        self.name = name
        super().__init__(description or f"{resource_type} {name!r} already exists")


class FailedPrecondition(ServiceError):
    pass


class Unavailable(ServiceError):
    """A dependency (the database, the embedder) cannot serve the call now; retrying may work."""


class _WithReason(ServiceError):
    """An error with a machine-readable reason (`google.rpc.ErrorInfo`)."""

    def __init__(self, reason: str, message: str) -> None:
        self.reason = reason
        super().__init__(message)


class Unauthenticated(_WithReason):
    """No API key, or one that is not valid."""


class PermissionDenied(_WithReason):
    """A valid key whose role may not make this call."""


class ResourceExhausted(_WithReason):
    """Over a limit: the message says which, and retrying later may work."""


class Starting(_WithReason):
    """The service is not ready yet (UNAVAILABLE): its database or model is still starting."""
