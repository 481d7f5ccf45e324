import datetime

from contextfold.v1 import conversation_pb2 as _conversation_pb2
from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import field_mask_pb2 as _field_mask_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Ranking(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RANKING_UNSPECIFIED: _ClassVar[Ranking]
    RANKING_SIMILARITY: _ClassVar[Ranking]
    RANKING_STORE_AWARE: _ClassVar[Ranking]
    RANKING_HYBRID: _ClassVar[Ranking]
    RANKING_RERANK: _ClassVar[Ranking]
RANKING_UNSPECIFIED: Ranking
RANKING_SIMILARITY: Ranking
RANKING_STORE_AWARE: Ranking
RANKING_HYBRID: Ranking
RANKING_RERANK: Ranking

class Store(_message.Message):
    __slots__ = ("name", "description", "dimension", "create_time", "memory_count", "default_ttl")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    DIMENSION_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    MEMORY_COUNT_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_TTL_FIELD_NUMBER: _ClassVar[int]
    name: str
    description: str
    dimension: int
    create_time: _timestamp_pb2.Timestamp
    memory_count: int
    default_ttl: _duration_pb2.Duration
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., dimension: _Optional[int] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., memory_count: _Optional[int] = ..., default_ttl: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class Scope(_message.Message):
    __slots__ = ("user_id", "agent_id", "session_id")
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    user_id: str
    agent_id: str
    session_id: str
    def __init__(self, user_id: _Optional[str] = ..., agent_id: _Optional[str] = ..., session_id: _Optional[str] = ...) -> None: ...

class Memory(_message.Message):
    __slots__ = ("id", "store", "content", "metadata", "user_id", "agent_id", "session_id", "vector", "create_time", "update_time", "expire_time", "etag")
    ID_FIELD_NUMBER: _ClassVar[int]
    STORE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    VECTOR_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    EXPIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    ETAG_FIELD_NUMBER: _ClassVar[int]
    id: str
    store: str
    content: str
    metadata: _struct_pb2.Struct
    user_id: str
    agent_id: str
    session_id: str
    vector: _containers.RepeatedScalarFieldContainer[float]
    create_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    expire_time: _timestamp_pb2.Timestamp
    etag: str
    def __init__(self, id: _Optional[str] = ..., store: _Optional[str] = ..., content: _Optional[str] = ..., metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., user_id: _Optional[str] = ..., agent_id: _Optional[str] = ..., session_id: _Optional[str] = ..., vector: _Optional[_Iterable[float]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., expire_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., etag: _Optional[str] = ...) -> None: ...

class Filter(_message.Message):
    __slots__ = ("field", "all", "any")
    FIELD_FIELD_NUMBER: _ClassVar[int]
    ALL_FIELD_NUMBER: _ClassVar[int]
    ANY_FIELD_NUMBER: _ClassVar[int]
    NOT_FIELD_NUMBER: _ClassVar[int]
    field: FieldFilter
    all: FilterList
    any: FilterList
    def __init__(self, field: _Optional[_Union[FieldFilter, _Mapping]] = ..., all: _Optional[_Union[FilterList, _Mapping]] = ..., any: _Optional[_Union[FilterList, _Mapping]] = ..., **kwargs) -> None: ...

class FilterList(_message.Message):
    __slots__ = ("filters",)
    FILTERS_FIELD_NUMBER: _ClassVar[int]
    filters: _containers.RepeatedCompositeFieldContainer[Filter]
    def __init__(self, filters: _Optional[_Iterable[_Union[Filter, _Mapping]]] = ...) -> None: ...

class FieldFilter(_message.Message):
    __slots__ = ("field", "equals", "contains", "range", "exists")
    FIELD_FIELD_NUMBER: _ClassVar[int]
    EQUALS_FIELD_NUMBER: _ClassVar[int]
    IN_FIELD_NUMBER: _ClassVar[int]
    CONTAINS_FIELD_NUMBER: _ClassVar[int]
    RANGE_FIELD_NUMBER: _ClassVar[int]
    EXISTS_FIELD_NUMBER: _ClassVar[int]
    field: str
    equals: _struct_pb2.Value
    contains: _struct_pb2.Value
    range: Range
    exists: bool
    def __init__(self, field: _Optional[str] = ..., equals: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., contains: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., range: _Optional[_Union[Range, _Mapping]] = ..., exists: _Optional[bool] = ..., **kwargs) -> None: ...

class Range(_message.Message):
    __slots__ = ("gt", "gte", "lt", "lte")
    GT_FIELD_NUMBER: _ClassVar[int]
    GTE_FIELD_NUMBER: _ClassVar[int]
    LT_FIELD_NUMBER: _ClassVar[int]
    LTE_FIELD_NUMBER: _ClassVar[int]
    gt: Bound
    gte: Bound
    lt: Bound
    lte: Bound
    def __init__(self, gt: _Optional[_Union[Bound, _Mapping]] = ..., gte: _Optional[_Union[Bound, _Mapping]] = ..., lt: _Optional[_Union[Bound, _Mapping]] = ..., lte: _Optional[_Union[Bound, _Mapping]] = ...) -> None: ...

class Bound(_message.Message):
    __slots__ = ("number", "time")
    NUMBER_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    number: float
    time: _timestamp_pb2.Timestamp
    def __init__(self, number: _Optional[float] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ScoredMemory(_message.Message):
    __slots__ = ("memory", "score")
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    memory: Memory
    score: float
    def __init__(self, memory: _Optional[_Union[Memory, _Mapping]] = ..., score: _Optional[float] = ...) -> None: ...

class CreateStoreRequest(_message.Message):
    __slots__ = ("store",)
    STORE_FIELD_NUMBER: _ClassVar[int]
    store: Store
    def __init__(self, store: _Optional[_Union[Store, _Mapping]] = ...) -> None: ...

class CreateStoreResponse(_message.Message):
    __slots__ = ("store",)
    STORE_FIELD_NUMBER: _ClassVar[int]
    store: Store
    def __init__(self, store: _Optional[_Union[Store, _Mapping]] = ...) -> None: ...

class ListStoresRequest(_message.Message):
    __slots__ = ("page_size", "page_token")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListStoresResponse(_message.Message):
    __slots__ = ("stores", "next_page_token")
    STORES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    stores: _containers.RepeatedCompositeFieldContainer[Store]
    next_page_token: str
    def __init__(self, stores: _Optional[_Iterable[_Union[Store, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class DeleteStoreRequest(_message.Message):
    __slots__ = ("name", "force")
    NAME_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    name: str
    force: bool
    def __init__(self, name: _Optional[str] = ..., force: _Optional[bool] = ...) -> None: ...

class DeleteStoreResponse(_message.Message):
    __slots__ = ("deleted_memory_count",)
    DELETED_MEMORY_COUNT_FIELD_NUMBER: _ClassVar[int]
    deleted_memory_count: int
    def __init__(self, deleted_memory_count: _Optional[int] = ...) -> None: ...

class AddMemoriesRequest(_message.Message):
    __slots__ = ("store", "memories")
    STORE_FIELD_NUMBER: _ClassVar[int]
    MEMORIES_FIELD_NUMBER: _ClassVar[int]
    store: str
    memories: _containers.RepeatedCompositeFieldContainer[Memory]
    def __init__(self, store: _Optional[str] = ..., memories: _Optional[_Iterable[_Union[Memory, _Mapping]]] = ...) -> None: ...

class AddMemoriesResponse(_message.Message):
    __slots__ = ("memories",)
    MEMORIES_FIELD_NUMBER: _ClassVar[int]
    memories: _containers.RepeatedCompositeFieldContainer[Memory]
    def __init__(self, memories: _Optional[_Iterable[_Union[Memory, _Mapping]]] = ...) -> None: ...

class SearchMemoriesRequest(_message.Message):
    __slots__ = ("query", "query_vector", "stores", "max_results", "scope", "min_score", "ranking", "filter", "asked_time")
    QUERY_FIELD_NUMBER: _ClassVar[int]
    QUERY_VECTOR_FIELD_NUMBER: _ClassVar[int]
    STORES_FIELD_NUMBER: _ClassVar[int]
    MAX_RESULTS_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    MIN_SCORE_FIELD_NUMBER: _ClassVar[int]
    RANKING_FIELD_NUMBER: _ClassVar[int]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    ASKED_TIME_FIELD_NUMBER: _ClassVar[int]
    query: str
    query_vector: _containers.RepeatedScalarFieldContainer[float]
    stores: _containers.RepeatedScalarFieldContainer[str]
    max_results: int
    scope: Scope
    min_score: float
    ranking: Ranking
    filter: Filter
    asked_time: _timestamp_pb2.Timestamp
    def __init__(self, query: _Optional[str] = ..., query_vector: _Optional[_Iterable[float]] = ..., stores: _Optional[_Iterable[str]] = ..., max_results: _Optional[int] = ..., scope: _Optional[_Union[Scope, _Mapping]] = ..., min_score: _Optional[float] = ..., ranking: _Optional[_Union[Ranking, str]] = ..., filter: _Optional[_Union[Filter, _Mapping]] = ..., asked_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class SearchMemoriesResponse(_message.Message):
    __slots__ = ("results", "ranking", "database")
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    RANKING_FIELD_NUMBER: _ClassVar[int]
    DATABASE_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[ScoredMemory]
    ranking: Ranking
    database: str
    def __init__(self, results: _Optional[_Iterable[_Union[ScoredMemory, _Mapping]]] = ..., ranking: _Optional[_Union[Ranking, str]] = ..., database: _Optional[str] = ...) -> None: ...

class GetMemoryRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class GetMemoryResponse(_message.Message):
    __slots__ = ("memory",)
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    memory: Memory
    def __init__(self, memory: _Optional[_Union[Memory, _Mapping]] = ...) -> None: ...

class ListMemoriesRequest(_message.Message):
    __slots__ = ("store", "page_size", "page_token", "scope", "filter")
    STORE_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    store: str
    page_size: int
    page_token: str
    scope: Scope
    filter: Filter
    def __init__(self, store: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., scope: _Optional[_Union[Scope, _Mapping]] = ..., filter: _Optional[_Union[Filter, _Mapping]] = ...) -> None: ...

class ListMemoriesResponse(_message.Message):
    __slots__ = ("memories", "next_page_token")
    MEMORIES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    memories: _containers.RepeatedCompositeFieldContainer[Memory]
    next_page_token: str
    def __init__(self, memories: _Optional[_Iterable[_Union[Memory, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class DeleteMemoriesRequest(_message.Message):
    __slots__ = ("ids", "allow_missing", "etag")
    IDS_FIELD_NUMBER: _ClassVar[int]
    ALLOW_MISSING_FIELD_NUMBER: _ClassVar[int]
    ETAG_FIELD_NUMBER: _ClassVar[int]
    ids: _containers.RepeatedScalarFieldContainer[str]
    allow_missing: bool
    etag: str
    def __init__(self, ids: _Optional[_Iterable[str]] = ..., allow_missing: _Optional[bool] = ..., etag: _Optional[str] = ...) -> None: ...

class DeleteMemoriesResponse(_message.Message):
    __slots__ = ("deleted_count",)
    DELETED_COUNT_FIELD_NUMBER: _ClassVar[int]
    deleted_count: int
    def __init__(self, deleted_count: _Optional[int] = ...) -> None: ...

class UpdateMemoryRequest(_message.Message):
    __slots__ = ("memory", "update_mask", "allow_missing")
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    UPDATE_MASK_FIELD_NUMBER: _ClassVar[int]
    ALLOW_MISSING_FIELD_NUMBER: _ClassVar[int]
    memory: Memory
    update_mask: _field_mask_pb2.FieldMask
    allow_missing: bool
    def __init__(self, memory: _Optional[_Union[Memory, _Mapping]] = ..., update_mask: _Optional[_Union[_field_mask_pb2.FieldMask, _Mapping]] = ..., allow_missing: _Optional[bool] = ...) -> None: ...

class UpdateMemoryResponse(_message.Message):
    __slots__ = ("memory", "created")
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    memory: Memory
    created: bool
    def __init__(self, memory: _Optional[_Union[Memory, _Mapping]] = ..., created: _Optional[bool] = ...) -> None: ...

class MemoryVersion(_message.Message):
    __slots__ = ("version", "memory", "replace_time", "replaced_by")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    REPLACE_TIME_FIELD_NUMBER: _ClassVar[int]
    REPLACED_BY_FIELD_NUMBER: _ClassVar[int]
    version: int
    memory: Memory
    replace_time: _timestamp_pb2.Timestamp
    replaced_by: str
    def __init__(self, version: _Optional[int] = ..., memory: _Optional[_Union[Memory, _Mapping]] = ..., replace_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., replaced_by: _Optional[str] = ...) -> None: ...

class ListMemoryVersionsRequest(_message.Message):
    __slots__ = ("id", "page_size", "page_token")
    ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    id: str
    page_size: int
    page_token: str
    def __init__(self, id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListMemoryVersionsResponse(_message.Message):
    __slots__ = ("versions", "next_page_token")
    VERSIONS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    versions: _containers.RepeatedCompositeFieldContainer[MemoryVersion]
    next_page_token: str
    def __init__(self, versions: _Optional[_Iterable[_Union[MemoryVersion, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class EraseMemoriesRequest(_message.Message):
    __slots__ = ("scope", "filter", "stores", "validate_only")
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    STORES_FIELD_NUMBER: _ClassVar[int]
    VALIDATE_ONLY_FIELD_NUMBER: _ClassVar[int]
    scope: Scope
    filter: Filter
    stores: _containers.RepeatedScalarFieldContainer[str]
    validate_only: bool
    def __init__(self, scope: _Optional[_Union[Scope, _Mapping]] = ..., filter: _Optional[_Union[Filter, _Mapping]] = ..., stores: _Optional[_Iterable[str]] = ..., validate_only: _Optional[bool] = ...) -> None: ...

class EraseMemoriesResponse(_message.Message):
    __slots__ = ("erased_count",)
    ERASED_COUNT_FIELD_NUMBER: _ClassVar[int]
    erased_count: int
    def __init__(self, erased_count: _Optional[int] = ...) -> None: ...

class ExportMemoriesRequest(_message.Message):
    __slots__ = ("stores", "scope", "filter")
    STORES_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    stores: _containers.RepeatedScalarFieldContainer[str]
    scope: Scope
    filter: Filter
    def __init__(self, stores: _Optional[_Iterable[str]] = ..., scope: _Optional[_Union[Scope, _Mapping]] = ..., filter: _Optional[_Union[Filter, _Mapping]] = ...) -> None: ...

class ExportMemoriesResponse(_message.Message):
    __slots__ = ("stores", "memories")
    STORES_FIELD_NUMBER: _ClassVar[int]
    MEMORIES_FIELD_NUMBER: _ClassVar[int]
    stores: _containers.RepeatedCompositeFieldContainer[Store]
    memories: _containers.RepeatedCompositeFieldContainer[Memory]
    def __init__(self, stores: _Optional[_Iterable[_Union[Store, _Mapping]]] = ..., memories: _Optional[_Iterable[_Union[Memory, _Mapping]]] = ...) -> None: ...

class ImportMemoriesRequest(_message.Message):
    __slots__ = ("stores", "memories")
    STORES_FIELD_NUMBER: _ClassVar[int]
    MEMORIES_FIELD_NUMBER: _ClassVar[int]
    stores: _containers.RepeatedCompositeFieldContainer[Store]
    memories: _containers.RepeatedCompositeFieldContainer[Memory]
    def __init__(self, stores: _Optional[_Iterable[_Union[Store, _Mapping]]] = ..., memories: _Optional[_Iterable[_Union[Memory, _Mapping]]] = ...) -> None: ...

class ImportMemoriesResponse(_message.Message):
    __slots__ = ("created_store_count", "added_count", "replaced_count", "unchanged_count")
    CREATED_STORE_COUNT_FIELD_NUMBER: _ClassVar[int]
    ADDED_COUNT_FIELD_NUMBER: _ClassVar[int]
    REPLACED_COUNT_FIELD_NUMBER: _ClassVar[int]
    UNCHANGED_COUNT_FIELD_NUMBER: _ClassVar[int]
    created_store_count: int
    added_count: int
    replaced_count: int
    unchanged_count: int
    def __init__(self, created_store_count: _Optional[int] = ..., added_count: _Optional[int] = ..., replaced_count: _Optional[int] = ..., unchanged_count: _Optional[int] = ...) -> None: ...

class RememberRequest(_message.Message):
    __slots__ = ("store", "messages", "scope", "roles", "min_chars", "conversation_id", "extract", "metadata")
    STORE_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    ROLES_FIELD_NUMBER: _ClassVar[int]
    MIN_CHARS_FIELD_NUMBER: _ClassVar[int]
    CONVERSATION_ID_FIELD_NUMBER: _ClassVar[int]
    EXTRACT_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    store: str
    messages: _containers.RepeatedCompositeFieldContainer[_conversation_pb2.Message]
    scope: Scope
    roles: _containers.RepeatedScalarFieldContainer[_conversation_pb2.Role]
    min_chars: int
    conversation_id: str
    extract: bool
    metadata: _struct_pb2.Struct
    def __init__(self, store: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[_conversation_pb2.Message, _Mapping]]] = ..., scope: _Optional[_Union[Scope, _Mapping]] = ..., roles: _Optional[_Iterable[_Union[_conversation_pb2.Role, str]]] = ..., min_chars: _Optional[int] = ..., conversation_id: _Optional[str] = ..., extract: _Optional[bool] = ..., metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class RememberedMemory(_message.Message):
    __slots__ = ("action", "memory")
    class Action(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        ACTION_UNSPECIFIED: _ClassVar[RememberedMemory.Action]
        ACTION_ADDED: _ClassVar[RememberedMemory.Action]
        ACTION_UPDATED: _ClassVar[RememberedMemory.Action]
    ACTION_UNSPECIFIED: RememberedMemory.Action
    ACTION_ADDED: RememberedMemory.Action
    ACTION_UPDATED: RememberedMemory.Action
    ACTION_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    action: RememberedMemory.Action
    memory: Memory
    def __init__(self, action: _Optional[_Union[RememberedMemory.Action, str]] = ..., memory: _Optional[_Union[Memory, _Mapping]] = ...) -> None: ...

class RememberResponse(_message.Message):
    __slots__ = ("memories", "remembered_turn_count", "skipped_turn_count")
    MEMORIES_FIELD_NUMBER: _ClassVar[int]
    REMEMBERED_TURN_COUNT_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_TURN_COUNT_FIELD_NUMBER: _ClassVar[int]
    memories: _containers.RepeatedCompositeFieldContainer[RememberedMemory]
    remembered_turn_count: int
    skipped_turn_count: int
    def __init__(self, memories: _Optional[_Iterable[_Union[RememberedMemory, _Mapping]]] = ..., remembered_turn_count: _Optional[int] = ..., skipped_turn_count: _Optional[int] = ...) -> None: ...
