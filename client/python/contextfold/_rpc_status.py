"""Decoding `google.rpc.Status` details without a dependency beyond protobuf.

The server attaches a `google.rpc.Status` to each error in the
`grpc-status-details-bin` trailer. Its message types are defined here in a
private descriptor pool, wire-compatible with googleapis' own, so the client
reads them without pulling in googleapis-common-protos, and without clashing
with it when an application has it installed.
"""

from __future__ import annotations

from google.protobuf import any_pb2, descriptor_pb2, descriptor_pool, message_factory

_F = descriptor_pb2.FieldDescriptorProto


def _field(
    name: str, number: int, kind: int, label: int = _F.LABEL_OPTIONAL, type_name: str = ""
) -> descriptor_pb2.FieldDescriptorProto:
    field = _F(name=name, number=number, type=kind, label=label)
    if type_name:
        field.type_name = type_name
    return field


def _build_pool() -> descriptor_pool.DescriptorPool:
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(any_pb2.DESCRIPTOR.serialized_pb)
    repeated = _F.LABEL_REPEATED
    details = descriptor_pb2.FileDescriptorProto(
        name="contextfold/_rpc_status.proto",
        package="google.rpc",
        syntax="proto3",
        dependency=["google/protobuf/any.proto"],
        message_type=[
            descriptor_pb2.DescriptorProto(
                name="Status",
                field=[
                    _field("code", 1, _F.TYPE_INT32),
                    _field("message", 2, _F.TYPE_STRING),
                    _field("details", 3, _F.TYPE_MESSAGE, repeated, ".google.protobuf.Any"),
                ],
            ),
            descriptor_pb2.DescriptorProto(
                name="BadRequest",
                field=[
                    _field("field_violations", 1, _F.TYPE_MESSAGE, repeated, ".google.rpc.BadRequest.FieldViolation")
                ],
                nested_type=[
                    descriptor_pb2.DescriptorProto(
                        name="FieldViolation",
                        field=[
                            _field("field", 1, _F.TYPE_STRING),
                            _field("description", 2, _F.TYPE_STRING),
                            _field("reason", 3, _F.TYPE_STRING),
                        ],
                    )
                ],
            ),
            descriptor_pb2.DescriptorProto(
                name="ResourceInfo",
                field=[
                    _field("resource_type", 1, _F.TYPE_STRING),
                    _field("resource_name", 2, _F.TYPE_STRING),
                    _field("owner", 3, _F.TYPE_STRING),
                    _field("description", 4, _F.TYPE_STRING),
                ],
            ),
            descriptor_pb2.DescriptorProto(
                name="ErrorInfo",
                field=[_field("reason", 1, _F.TYPE_STRING), _field("domain", 2, _F.TYPE_STRING)],
            ),
        ],
    )
    pool.Add(details)
    return pool


_POOL = _build_pool()
Status = message_factory.GetMessageClass(_POOL.FindMessageTypeByName("google.rpc.Status"))
DETAIL_TYPES = {
    name: message_factory.GetMessageClass(_POOL.FindMessageTypeByName(f"google.rpc.{name}"))
    for name in ("BadRequest", "ResourceInfo", "ErrorInfo")
}


def decode_details(status_bytes: bytes) -> list:
    """The detail messages of a serialized `google.rpc.Status` that this client knows."""
    status = Status.FromString(status_bytes)
    decoded = []
    for detail in status.details:
        kind = DETAIL_TYPES.get(detail.type_url.rsplit("/", 1)[-1].removeprefix("google.rpc."))
        if kind is not None:
            decoded.append(kind.FromString(detail.value))
    return decoded
