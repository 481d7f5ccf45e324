from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Role(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ROLE_UNSPECIFIED: _ClassVar[Role]
    ROLE_USER: _ClassVar[Role]
    ROLE_ASSISTANT: _ClassVar[Role]
ROLE_UNSPECIFIED: Role
ROLE_USER: Role
ROLE_ASSISTANT: Role

class Message(_message.Message):
    __slots__ = ("role", "content", "metadata_json")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    METADATA_JSON_FIELD_NUMBER: _ClassVar[int]
    role: Role
    content: _containers.RepeatedCompositeFieldContainer[ContentBlock]
    metadata_json: str
    def __init__(self, role: _Optional[_Union[Role, str]] = ..., content: _Optional[_Iterable[_Union[ContentBlock, _Mapping]]] = ..., metadata_json: _Optional[str] = ...) -> None: ...

class ContentBlock(_message.Message):
    __slots__ = ("text", "tool_use", "tool_result", "image", "document", "reasoning", "injected", "raw_json")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TOOL_USE_FIELD_NUMBER: _ClassVar[int]
    TOOL_RESULT_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    DOCUMENT_FIELD_NUMBER: _ClassVar[int]
    REASONING_FIELD_NUMBER: _ClassVar[int]
    INJECTED_FIELD_NUMBER: _ClassVar[int]
    RAW_JSON_FIELD_NUMBER: _ClassVar[int]
    text: str
    tool_use: ToolUseBlock
    tool_result: ToolResultBlock
    image: ImageBlock
    document: DocumentBlock
    reasoning: ReasoningBlock
    injected: InjectedBlock
    raw_json: str
    def __init__(self, text: _Optional[str] = ..., tool_use: _Optional[_Union[ToolUseBlock, _Mapping]] = ..., tool_result: _Optional[_Union[ToolResultBlock, _Mapping]] = ..., image: _Optional[_Union[ImageBlock, _Mapping]] = ..., document: _Optional[_Union[DocumentBlock, _Mapping]] = ..., reasoning: _Optional[_Union[ReasoningBlock, _Mapping]] = ..., injected: _Optional[_Union[InjectedBlock, _Mapping]] = ..., raw_json: _Optional[str] = ...) -> None: ...

class ToolUseBlock(_message.Message):
    __slots__ = ("tool_use_id", "name", "input_json")
    TOOL_USE_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    INPUT_JSON_FIELD_NUMBER: _ClassVar[int]
    tool_use_id: str
    name: str
    input_json: str
    def __init__(self, tool_use_id: _Optional[str] = ..., name: _Optional[str] = ..., input_json: _Optional[str] = ...) -> None: ...

class ToolResultBlock(_message.Message):
    __slots__ = ("tool_use_id", "status", "content_json")
    TOOL_USE_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    CONTENT_JSON_FIELD_NUMBER: _ClassVar[int]
    tool_use_id: str
    status: str
    content_json: str
    def __init__(self, tool_use_id: _Optional[str] = ..., status: _Optional[str] = ..., content_json: _Optional[str] = ...) -> None: ...

class ImageBlock(_message.Message):
    __slots__ = ("format", "data")
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    format: str
    data: bytes
    def __init__(self, format: _Optional[str] = ..., data: _Optional[bytes] = ...) -> None: ...

class DocumentBlock(_message.Message):
    __slots__ = ("format", "name", "data")
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    format: str
    name: str
    data: bytes
    def __init__(self, format: _Optional[str] = ..., name: _Optional[str] = ..., data: _Optional[bytes] = ...) -> None: ...

class ReasoningBlock(_message.Message):
    __slots__ = ("text", "signature")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    text: str
    signature: str
    def __init__(self, text: _Optional[str] = ..., signature: _Optional[str] = ...) -> None: ...

class InjectedBlock(_message.Message):
    __slots__ = ("source", "text", "entry_ids", "sources")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    ENTRY_IDS_FIELD_NUMBER: _ClassVar[int]
    SOURCES_FIELD_NUMBER: _ClassVar[int]
    source: str
    text: str
    entry_ids: _containers.RepeatedScalarFieldContainer[str]
    sources: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, source: _Optional[str] = ..., text: _Optional[str] = ..., entry_ids: _Optional[_Iterable[str]] = ..., sources: _Optional[_Iterable[str]] = ...) -> None: ...
