"""Errors the service reports to callers, each carrying its status code and its details.

Adapters and servicers raise these. Each class names its `google.rpc.Code` and
builds its machine-readable details (`google.rpc.BadRequest` naming each bad
field, `ResourceInfo`, `ErrorInfo`), as python-api-core's exceptions carry
theirs, so `api.status` sends any of them the same way. Anything else that
escapes a call is a bug.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

from google.protobuf.message import Message
from google.rpc import code_pb2, error_details_pb2

DOMAIN = "contextfold.dev"


class ServiceError(Exception):
    """An error whose message is safe and useful to show the caller."""

    code: ClassVar[int] = code_pb2.INTERNAL

    def details(self) -> list[Message]:
        """The `google.rpc` details sent with the status."""
        return []


@dataclass
class FieldViolation:
    field: str
    description: str

    def __post_init__(self) -> None:
        # A description may quote what the caller sent (a parser's "token recognition error at: …"):
        # control characters are shown escaped, never sent raw to a terminal or a log.
        self.description = visible(self.description)


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def visible(text: str) -> str:
    """`text` with its control characters (but tab and line feed) written as escapes: `\\x00`."""
    return _CONTROL.sub(lambda match: f"\\x{ord(match.group()):02x}", text)


class InvalidArgument(ServiceError):
    """A request field is malformed; names every offending field and why."""

    code = code_pb2.INVALID_ARGUMENT

    def __init__(self, *violations: FieldViolation) -> None:
        self.violations = list(violations)
        super().__init__("; ".join(f"{v.field}: {v.description}" for v in self.violations))

    @classmethod
    def of(cls, field: str, description: str) -> InvalidArgument:
        return cls(FieldViolation(field, description))

    def details(self) -> list[Message]:
        violations = [
            error_details_pb2.BadRequest.FieldViolation(field=v.field, description=v.description)
            for v in self.violations
        ]
        return [error_details_pb2.BadRequest(field_violations=violations)]


class _AboutResource(ServiceError):
    """An error about one resource (`google.rpc.ResourceInfo`)."""

    verb: ClassVar[str]

    def __init__(self, resource_type: str, name: str, description: str = "") -> None:
        self.resource_type = resource_type
        self.name = name
        super().__init__(description or f"{resource_type} {name!r} {self.verb}")

    def details(self) -> list[Message]:
        return [
            error_details_pb2.ResourceInfo(
                resource_type=self.resource_type, resource_name=self.name, description=str(self)
            )
        ]


class NotFound(_AboutResource):
    code = code_pb2.NOT_FOUND
    verb = "does not exist"


class AlreadyExists(_AboutResource):
    code = code_pb2.ALREADY_EXISTS
    verb = "already exists"


class FailedPrecondition(ServiceError):
    code = code_pb2.FAILED_PRECONDITION


class _WithReason(ServiceError):
    """An error with a machine-readable reason (`google.rpc.ErrorInfo`), given first, then its sentence."""

    def __init__(self, reason: str, message: str) -> None:
        self.reason = reason
        super().__init__(message)

    def details(self) -> list[Message]:
        return [error_details_pb2.ErrorInfo(reason=self.reason, domain=DOMAIN)]


class Unavailable(_WithReason):
    """A dependency (the database, the embedder) cannot serve the call now; retrying may work."""

    code = code_pb2.UNAVAILABLE


class Starting(_WithReason):
    """The service is not ready yet (UNAVAILABLE): its database or model is still starting."""

    code = code_pb2.UNAVAILABLE


class Unauthenticated(_WithReason):
    """No API key, or one that is not valid."""

    code = code_pb2.UNAUTHENTICATED


class PermissionDenied(_WithReason):
    """A valid key whose role may not make this call."""

    code = code_pb2.PERMISSION_DENIED


class ResourceExhausted(_WithReason):
    """Over a limit: the message says which, and retrying later may work. With `subject` (what is at its
    limit, e.g. `namespace:acme`), a `google.rpc.QuotaFailure` names it; with `retry_after` (seconds),
    a `google.rpc.RetryInfo` says when a retry may succeed."""

    code = code_pb2.RESOURCE_EXHAUSTED

    def __init__(self, reason: str, message: str, *, subject: str = "", retry_after: float | None = None) -> None:
        super().__init__(reason, message)
        self.subject = subject
        self.retry_after = retry_after

    def details(self) -> list[Message]:
        details = super().details()
        if self.subject:
            violation = error_details_pb2.QuotaFailure.Violation(subject=self.subject, description=str(self))
            details.append(error_details_pb2.QuotaFailure(violations=[violation]))
        if self.retry_after is not None:
            retry = error_details_pb2.RetryInfo()
            retry.retry_delay.FromMilliseconds(int(self.retry_after * 1000))
            details.append(retry)
        return details


class StatementTimeout(_WithReason):
    """A statement cut off by the server's longest for one statement (RESOURCE_EXHAUSTED: the server's
    limit, which a narrower filter or scope stays within). Nothing it did is kept (its transaction is
    rolled back)."""

    code = code_pb2.RESOURCE_EXHAUSTED


class DeadlineReached(_WithReason):
    """The call's work cut off because the caller's own deadline came (DEADLINE_EXCEEDED, as gRPC says of
    a deadline): nothing past the cut is kept. A retry with more time may succeed."""

    code = code_pb2.DEADLINE_EXCEEDED


class CallTooLong(_WithReason):
    """A call that set no deadline ran past the server's longest (DEADLINE_EXCEEDED): none runs unbounded."""

    code = code_pb2.DEADLINE_EXCEEDED


class StreamIdle(_WithReason):
    """A stream that moved nothing for too long (DEADLINE_EXCEEDED): no request came, or the caller read
    no answer. It held a call's slot; it is ended so it holds it no more."""

    code = code_pb2.DEADLINE_EXCEEDED


class Aborted(_WithReason):
    """A write lost to another: the entry changed since it was read (its etag), or a concurrent call
    took what this one was doing. Read again and retry."""

    code = code_pb2.ABORTED
