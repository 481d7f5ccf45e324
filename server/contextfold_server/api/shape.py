"""A large Inject request's shape, read before the request is parsed.

protobuf's parser holds the interpreter for a whole message, and a request of many
tiny fields (400,000 one-letter blocks in 2 MB) takes tens of milliseconds to parse,
every other call waiting. So a large request is first read shallowly, as a few
byte strings (types below with the same field numbers, whose fields are `bytes`):
its messages, their content blocks, its app state and its provider names are
counted at a third of the cost, and a request over a limit is refused before the
full parse. A request within the limits parses in time bounded by them.
"""

from __future__ import annotations

import functools
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError

from ..errors import InvalidArgument
from .fields import (
    MAX_APP_STATE_BYTES,
    MAX_MESSAGES,
    MAX_PROVIDERS_NAMED,
    check_content_blocks,
    check_count,
    malformed,
)

# Requests up to this size are parsed whole at once: they cannot break a limit by much.
_READ_SHALLOWLY_FROM = MAX_APP_STATE_BYTES

_F = descriptor_pb2.FieldDescriptorProto


@functools.cache
def _shallow_types() -> tuple[Any, Any]:
    """InjectRequest as {1: messages, 4: app_state, 6: providers} and Message as {2: content}, all bytes."""

    def field(name: str, number: int, repeated: bool = True) -> descriptor_pb2.FieldDescriptorProto:
        label = _F.LABEL_REPEATED if repeated else _F.LABEL_OPTIONAL
        return _F(name=name, number=number, type=_F.TYPE_BYTES, label=label)

    shallow = descriptor_pb2.FileDescriptorProto(
        name="contextfold/shallow.proto",
        package="contextfold.shallow",
        syntax="proto3",
        message_type=[
            descriptor_pb2.DescriptorProto(
                name="InjectRequest",
                field=[field("messages", 1), field("app_state", 4, repeated=False), field("providers", 6)],
            ),
            descriptor_pb2.DescriptorProto(name="Message", field=[field("content", 2)]),
        ],
    )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(shallow)
    return tuple(
        message_factory.GetMessageClass(pool.FindMessageTypeByName(f"contextfold.shallow.{name}"))
        for name in ("InjectRequest", "Message")
    )


def check_inject_shape(data: bytes) -> None:
    """Refuse a large Inject request over a limit without parsing it whole."""
    if len(data) <= _READ_SHALLOWLY_FROM:
        return
    request_type, message_type = _shallow_types()
    try:
        request = request_type.FromString(data)
        check_count(request.messages, MAX_MESSAGES, "messages", "messages")
        blocks = sum(len(message_type.FromString(message).content) for message in request.messages)
    except DecodeError as error:
        raise malformed(error) from None
    check_content_blocks(blocks)
    if len(request.app_state) > MAX_APP_STATE_BYTES:
        raise InvalidArgument.of(
            "app_state", f"takes {len(request.app_state)} bytes; the limit is {MAX_APP_STATE_BYTES}"
        )
    check_count(request.providers, MAX_PROVIDERS_NAMED, "providers", "provider names")
