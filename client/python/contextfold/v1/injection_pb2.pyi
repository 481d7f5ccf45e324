import datetime

from contextfold.v1 import conversation_pb2 as _conversation_pb2
from contextfold.v1 import memory_pb2 as _memory_pb2
from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Trigger(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TRIGGER_UNSPECIFIED: _ClassVar[Trigger]
    TRIGGER_USER_TURN: _ClassVar[Trigger]
    TRIGGER_EVERY_TURN: _ClassVar[Trigger]

class Format(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FORMAT_UNSPECIFIED: _ClassVar[Format]
    FORMAT_XML: _ClassVar[Format]
    FORMAT_BULLETS: _ClassVar[Format]
    FORMAT_MARKDOWN: _ClassVar[Format]

class SkipReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SKIP_REASON_UNSPECIFIED: _ClassVar[SkipReason]
    SKIP_REASON_NOT_TRIGGERED: _ClassVar[SkipReason]
    SKIP_REASON_NO_QUERY: _ClassVar[SkipReason]
    SKIP_REASON_NO_USER_MESSAGE: _ClassVar[SkipReason]
    SKIP_REASON_NO_ENTRIES: _ClassVar[SkipReason]
    SKIP_REASON_ALREADY_INJECTED: _ClassVar[SkipReason]
    SKIP_REASON_EMPTY_TEXT: _ClassVar[SkipReason]
    SKIP_REASON_FAILED: _ClassVar[SkipReason]
    SKIP_REASON_DISABLED: _ClassVar[SkipReason]
    SKIP_REASON_TIMEOUT: _ClassVar[SkipReason]
    SKIP_REASON_OVER_BUDGET: _ClassVar[SkipReason]

class CandidateVerdict(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CANDIDATE_VERDICT_UNSPECIFIED: _ClassVar[CandidateVerdict]
    CANDIDATE_VERDICT_INJECTED: _ClassVar[CandidateVerdict]
    CANDIDATE_VERDICT_RANKED_BELOW: _ClassVar[CandidateVerdict]
    CANDIDATE_VERDICT_BELOW_MIN_SCORE: _ClassVar[CandidateVerdict]
    CANDIDATE_VERDICT_IN_CONVERSATION: _ClassVar[CandidateVerdict]
    CANDIDATE_VERDICT_OVER_BUDGET: _ClassVar[CandidateVerdict]
    CANDIDATE_VERDICT_NOT_FOLDED: _ClassVar[CandidateVerdict]
    CANDIDATE_VERDICT_NOT_RELEVANT: _ClassVar[CandidateVerdict]
    CANDIDATE_VERDICT_NEAR_COPY: _ClassVar[CandidateVerdict]
TRIGGER_UNSPECIFIED: Trigger
TRIGGER_USER_TURN: Trigger
TRIGGER_EVERY_TURN: Trigger
FORMAT_UNSPECIFIED: Format
FORMAT_XML: Format
FORMAT_BULLETS: Format
FORMAT_MARKDOWN: Format
SKIP_REASON_UNSPECIFIED: SkipReason
SKIP_REASON_NOT_TRIGGERED: SkipReason
SKIP_REASON_NO_QUERY: SkipReason
SKIP_REASON_NO_USER_MESSAGE: SkipReason
SKIP_REASON_NO_ENTRIES: SkipReason
SKIP_REASON_ALREADY_INJECTED: SkipReason
SKIP_REASON_EMPTY_TEXT: SkipReason
SKIP_REASON_FAILED: SkipReason
SKIP_REASON_DISABLED: SkipReason
SKIP_REASON_TIMEOUT: SkipReason
SKIP_REASON_OVER_BUDGET: SkipReason
CANDIDATE_VERDICT_UNSPECIFIED: CandidateVerdict
CANDIDATE_VERDICT_INJECTED: CandidateVerdict
CANDIDATE_VERDICT_RANKED_BELOW: CandidateVerdict
CANDIDATE_VERDICT_BELOW_MIN_SCORE: CandidateVerdict
CANDIDATE_VERDICT_IN_CONVERSATION: CandidateVerdict
CANDIDATE_VERDICT_OVER_BUDGET: CandidateVerdict
CANDIDATE_VERDICT_NOT_FOLDED: CandidateVerdict
CANDIDATE_VERDICT_NOT_RELEVANT: CandidateVerdict
CANDIDATE_VERDICT_NEAR_COPY: CandidateVerdict

class MemoryOptions(_message.Message):
    __slots__ = ("stores", "max_entries", "query", "scope", "min_score", "query_vector", "priority", "max_tokens", "query_expression", "format", "format_template", "ranking", "filter", "asked_time")
    STORES_FIELD_NUMBER: _ClassVar[int]
    MAX_ENTRIES_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    MIN_SCORE_FIELD_NUMBER: _ClassVar[int]
    QUERY_VECTOR_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    QUERY_EXPRESSION_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    FORMAT_TEMPLATE_FIELD_NUMBER: _ClassVar[int]
    RANKING_FIELD_NUMBER: _ClassVar[int]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    ASKED_TIME_FIELD_NUMBER: _ClassVar[int]
    stores: _containers.RepeatedScalarFieldContainer[str]
    max_entries: int
    query: str
    scope: _memory_pb2.Scope
    min_score: float
    query_vector: _containers.RepeatedScalarFieldContainer[float]
    priority: int
    max_tokens: int
    query_expression: str
    format: Format
    format_template: str
    ranking: _memory_pb2.Ranking
    filter: _memory_pb2.Filter
    asked_time: _timestamp_pb2.Timestamp
    def __init__(self, stores: _Optional[_Iterable[str]] = ..., max_entries: _Optional[int] = ..., query: _Optional[str] = ..., scope: _Optional[_Union[_memory_pb2.Scope, _Mapping]] = ..., min_score: _Optional[float] = ..., query_vector: _Optional[_Iterable[float]] = ..., priority: _Optional[int] = ..., max_tokens: _Optional[int] = ..., query_expression: _Optional[str] = ..., format: _Optional[_Union[Format, str]] = ..., format_template: _Optional[str] = ..., ranking: _Optional[_Union[_memory_pb2.Ranking, str]] = ..., filter: _Optional[_Union[_memory_pb2.Filter, _Mapping]] = ..., asked_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class Agent(_message.Message):
    __slots__ = ("id", "name")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class InjectRequest(_message.Message):
    __slots__ = ("messages", "trigger", "memory", "app_state", "agent", "providers", "max_tokens", "coalesce", "trigger_expression", "explain")
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    TRIGGER_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    APP_STATE_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    PROVIDERS_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COALESCE_FIELD_NUMBER: _ClassVar[int]
    TRIGGER_EXPRESSION_FIELD_NUMBER: _ClassVar[int]
    EXPLAIN_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[_conversation_pb2.Message]
    trigger: Trigger
    memory: MemoryOptions
    app_state: _struct_pb2.Struct
    agent: Agent
    providers: _containers.RepeatedScalarFieldContainer[str]
    max_tokens: int
    coalesce: bool
    trigger_expression: str
    explain: bool
    def __init__(self, messages: _Optional[_Iterable[_Union[_conversation_pb2.Message, _Mapping]]] = ..., trigger: _Optional[_Union[Trigger, str]] = ..., memory: _Optional[_Union[MemoryOptions, _Mapping]] = ..., app_state: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., agent: _Optional[_Union[Agent, _Mapping]] = ..., providers: _Optional[_Iterable[str]] = ..., max_tokens: _Optional[int] = ..., coalesce: _Optional[bool] = ..., trigger_expression: _Optional[str] = ..., explain: _Optional[bool] = ...) -> None: ...

class SourceReport(_message.Message):
    __slots__ = ("source", "injected", "skip_reason", "detail", "priority", "tokens", "duration")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    INJECTED_FIELD_NUMBER: _ClassVar[int]
    SKIP_REASON_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    source: str
    injected: bool
    skip_reason: SkipReason
    detail: str
    priority: int
    tokens: int
    duration: _duration_pb2.Duration
    def __init__(self, source: _Optional[str] = ..., injected: _Optional[bool] = ..., skip_reason: _Optional[_Union[SkipReason, str]] = ..., detail: _Optional[str] = ..., priority: _Optional[int] = ..., tokens: _Optional[int] = ..., duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class InjectedEntry(_message.Message):
    __slots__ = ("id", "store", "score")
    ID_FIELD_NUMBER: _ClassVar[int]
    STORE_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    id: str
    store: str
    score: float
    def __init__(self, id: _Optional[str] = ..., store: _Optional[str] = ..., score: _Optional[float] = ...) -> None: ...

class CandidateReport(_message.Message):
    __slots__ = ("id", "store", "content", "score", "similarity", "signals", "verdict", "detail", "rank", "inputs")
    class SignalsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    class InputsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    STORE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    SIMILARITY_FIELD_NUMBER: _ClassVar[int]
    SIGNALS_FIELD_NUMBER: _ClassVar[int]
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    id: str
    store: str
    content: str
    score: float
    similarity: float
    signals: _containers.ScalarMap[str, float]
    verdict: CandidateVerdict
    detail: str
    rank: int
    inputs: _containers.ScalarMap[str, float]
    def __init__(self, id: _Optional[str] = ..., store: _Optional[str] = ..., content: _Optional[str] = ..., score: _Optional[float] = ..., similarity: _Optional[float] = ..., signals: _Optional[_Mapping[str, float]] = ..., verdict: _Optional[_Union[CandidateVerdict, str]] = ..., detail: _Optional[str] = ..., rank: _Optional[int] = ..., inputs: _Optional[_Mapping[str, float]] = ...) -> None: ...

class InjectionReport(_message.Message):
    __slots__ = ("injected", "skip_reason", "detail", "query", "entries", "target_message_index", "stage_durations", "sources", "total_tokens", "ranking", "database", "candidates")
    class StageDurationsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: _duration_pb2.Duration
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...
    INJECTED_FIELD_NUMBER: _ClassVar[int]
    SKIP_REASON_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    TARGET_MESSAGE_INDEX_FIELD_NUMBER: _ClassVar[int]
    STAGE_DURATIONS_FIELD_NUMBER: _ClassVar[int]
    SOURCES_FIELD_NUMBER: _ClassVar[int]
    TOTAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    RANKING_FIELD_NUMBER: _ClassVar[int]
    DATABASE_FIELD_NUMBER: _ClassVar[int]
    CANDIDATES_FIELD_NUMBER: _ClassVar[int]
    injected: bool
    skip_reason: SkipReason
    detail: str
    query: str
    entries: _containers.RepeatedCompositeFieldContainer[InjectedEntry]
    target_message_index: int
    stage_durations: _containers.MessageMap[str, _duration_pb2.Duration]
    sources: _containers.RepeatedCompositeFieldContainer[SourceReport]
    total_tokens: int
    ranking: _memory_pb2.Ranking
    database: str
    candidates: _containers.RepeatedCompositeFieldContainer[CandidateReport]
    def __init__(self, injected: _Optional[bool] = ..., skip_reason: _Optional[_Union[SkipReason, str]] = ..., detail: _Optional[str] = ..., query: _Optional[str] = ..., entries: _Optional[_Iterable[_Union[InjectedEntry, _Mapping]]] = ..., target_message_index: _Optional[int] = ..., stage_durations: _Optional[_Mapping[str, _duration_pb2.Duration]] = ..., sources: _Optional[_Iterable[_Union[SourceReport, _Mapping]]] = ..., total_tokens: _Optional[int] = ..., ranking: _Optional[_Union[_memory_pb2.Ranking, str]] = ..., database: _Optional[str] = ..., candidates: _Optional[_Iterable[_Union[CandidateReport, _Mapping]]] = ...) -> None: ...

class InjectResponse(_message.Message):
    __slots__ = ("messages", "report")
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    REPORT_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[_conversation_pb2.Message]
    report: InjectionReport
    def __init__(self, messages: _Optional[_Iterable[_Union[_conversation_pb2.Message, _Mapping]]] = ..., report: _Optional[_Union[InjectionReport, _Mapping]] = ...) -> None: ...
