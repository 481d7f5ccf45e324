import datetime

from contextfold.v1 import conversation_pb2 as _conversation_pb2
from contextfold.v1 import injection_pb2 as _injection_pb2
from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import field_mask_pb2 as _field_mask_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ProvideRequest(_message.Message):
    __slots__ = ("messages", "app_state", "agent", "provider", "namespace", "request_id")
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    APP_STATE_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[_conversation_pb2.Message]
    app_state: _struct_pb2.Struct
    agent: _injection_pb2.Agent
    provider: str
    namespace: str
    request_id: str
    def __init__(self, messages: _Optional[_Iterable[_Union[_conversation_pb2.Message, _Mapping]]] = ..., app_state: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., agent: _Optional[_Union[_injection_pb2.Agent, _Mapping]] = ..., provider: _Optional[str] = ..., namespace: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class ProvideResponse(_message.Message):
    __slots__ = ("text",)
    TEXT_FIELD_NUMBER: _ClassVar[int]
    text: str
    def __init__(self, text: _Optional[str] = ...) -> None: ...

class Provider(_message.Message):
    __slots__ = ("name", "target", "trigger", "priority", "timeout", "max_tokens", "enabled", "create_time", "update_time", "trigger_expression", "tls", "credential", "outcomes")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    TRIGGER_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    ENABLED_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    TRIGGER_EXPRESSION_FIELD_NUMBER: _ClassVar[int]
    TLS_FIELD_NUMBER: _ClassVar[int]
    CREDENTIAL_FIELD_NUMBER: _ClassVar[int]
    OUTCOMES_FIELD_NUMBER: _ClassVar[int]
    name: str
    target: str
    trigger: _injection_pb2.Trigger
    priority: int
    timeout: _duration_pb2.Duration
    max_tokens: int
    enabled: bool
    create_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    trigger_expression: str
    tls: ProviderTls
    credential: ProviderCredential
    outcomes: _containers.RepeatedCompositeFieldContainer[ProviderOutcome]
    def __init__(self, name: _Optional[str] = ..., target: _Optional[str] = ..., trigger: _Optional[_Union[_injection_pb2.Trigger, str]] = ..., priority: _Optional[int] = ..., timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., max_tokens: _Optional[int] = ..., enabled: _Optional[bool] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., trigger_expression: _Optional[str] = ..., tls: _Optional[_Union[ProviderTls, _Mapping]] = ..., credential: _Optional[_Union[ProviderCredential, _Mapping]] = ..., outcomes: _Optional[_Iterable[_Union[ProviderOutcome, _Mapping]]] = ...) -> None: ...

class ProviderOutcome(_message.Message):
    __slots__ = ("injected", "skip_reason", "count", "last_time", "last_detail")
    INJECTED_FIELD_NUMBER: _ClassVar[int]
    SKIP_REASON_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    LAST_TIME_FIELD_NUMBER: _ClassVar[int]
    LAST_DETAIL_FIELD_NUMBER: _ClassVar[int]
    injected: bool
    skip_reason: _injection_pb2.SkipReason
    count: int
    last_time: _timestamp_pb2.Timestamp
    last_detail: str
    def __init__(self, injected: _Optional[bool] = ..., skip_reason: _Optional[_Union[_injection_pb2.SkipReason, str]] = ..., count: _Optional[int] = ..., last_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., last_detail: _Optional[str] = ...) -> None: ...

class ProviderTls(_message.Message):
    __slots__ = ("ca_pem", "client_cert_pem", "client_key_pem", "server_name")
    CA_PEM_FIELD_NUMBER: _ClassVar[int]
    CLIENT_CERT_PEM_FIELD_NUMBER: _ClassVar[int]
    CLIENT_KEY_PEM_FIELD_NUMBER: _ClassVar[int]
    SERVER_NAME_FIELD_NUMBER: _ClassVar[int]
    ca_pem: str
    client_cert_pem: str
    client_key_pem: str
    server_name: str
    def __init__(self, ca_pem: _Optional[str] = ..., client_cert_pem: _Optional[str] = ..., client_key_pem: _Optional[str] = ..., server_name: _Optional[str] = ...) -> None: ...

class ProviderCredential(_message.Message):
    __slots__ = ("header", "value")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    header: str
    value: str
    def __init__(self, header: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...

class RegisterProviderRequest(_message.Message):
    __slots__ = ("provider",)
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    provider: Provider
    def __init__(self, provider: _Optional[_Union[Provider, _Mapping]] = ...) -> None: ...

class RegisterProviderResponse(_message.Message):
    __slots__ = ("provider",)
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    provider: Provider
    def __init__(self, provider: _Optional[_Union[Provider, _Mapping]] = ...) -> None: ...

class GetProviderRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class GetProviderResponse(_message.Message):
    __slots__ = ("provider",)
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    provider: Provider
    def __init__(self, provider: _Optional[_Union[Provider, _Mapping]] = ...) -> None: ...

class ListProvidersRequest(_message.Message):
    __slots__ = ("page_size", "page_token")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListProvidersResponse(_message.Message):
    __slots__ = ("providers", "next_page_token")
    PROVIDERS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    providers: _containers.RepeatedCompositeFieldContainer[Provider]
    next_page_token: str
    def __init__(self, providers: _Optional[_Iterable[_Union[Provider, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class UpdateProviderRequest(_message.Message):
    __slots__ = ("provider", "update_mask")
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    UPDATE_MASK_FIELD_NUMBER: _ClassVar[int]
    provider: Provider
    update_mask: _field_mask_pb2.FieldMask
    def __init__(self, provider: _Optional[_Union[Provider, _Mapping]] = ..., update_mask: _Optional[_Union[_field_mask_pb2.FieldMask, _Mapping]] = ...) -> None: ...

class UpdateProviderResponse(_message.Message):
    __slots__ = ("provider",)
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    provider: Provider
    def __init__(self, provider: _Optional[_Union[Provider, _Mapping]] = ...) -> None: ...

class DeleteProviderRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class DeleteProviderResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
