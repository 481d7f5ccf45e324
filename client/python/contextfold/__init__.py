"""contextfold: memory context injection for agents, as a remote service.

from contextfold import Client

with Client("localhost:50051") as cf:
    result = cf.inject(messages)
    send_to_model(render_for_model(result.messages))
"""

from ._requests import InjectOptions, SearchOptions
from .client import AsyncClient, Client, InjectResult
from .convert import from_proto_messages, message_dict, render_for_model, to_proto_messages
from .errors import (
    Aborted,
    AlreadyExists,
    ContextfoldError,
    DeadlineExceeded,
    FailedPrecondition,
    Internal,
    InvalidApiKey,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
    Unauthenticated,
    Unavailable,
)

__all__ = [
    "Aborted",
    "AlreadyExists",
    "AsyncClient",
    "Client",
    "ContextfoldError",
    "DeadlineExceeded",
    "FailedPrecondition",
    "InjectOptions",
    "InjectResult",
    "Internal",
    "InvalidApiKey",
    "InvalidArgument",
    "NotFound",
    "PermissionDenied",
    "ResourceExhausted",
    "SearchOptions",
    "Unauthenticated",
    "Unavailable",
    "from_proto_messages",
    "message_dict",
    "render_for_model",
    "to_proto_messages",
]
