import datetime

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
    __slots__ = ("name", "description", "dimension", "create_time", "memory_count")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    DIMENSION_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    MEMORY_COUNT_FIELD_NUMBER: _ClassVar[int]
    name: str
    description: str
    dimension: int
    create_time: _timestamp_pb2.Timestamp
    memory_count: int
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., dimension: _Optional[int] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., memory_count: _Optional[int] = ...) -> None: ...

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
    __slots__ = ("id", "store", "content", "metadata", "user_id", "agent_id", "session_id", "vector", "create_time")
    ID_FIELD_NUMBER: _ClassVar[int]
    STORE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    VECTOR_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    id: str
    store: str
    content: str
    metadata: _struct_pb2.Struct
    user_id: str
    agent_id: str
    session_id: str
    vector: _containers.RepeatedScalarFieldContainer[float]
    create_time: _timestamp_pb2.Timestamp
    def __init__(self, id: _Optional[str] = ..., store: _Optional[str] = ..., content: _Optional[str] = ..., metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., user_id: _Optional[str] = ..., agent_id: _Optional[str] = ..., session_id: _Optional[str] = ..., vector: _Optional[_Iterable[float]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

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
    __slots__ = ("query", "query_vector", "stores", "max_results", "scope", "min_score", "ranking")
    QUERY_FIELD_NUMBER: _ClassVar[int]
    QUERY_VECTOR_FIELD_NUMBER: _ClassVar[int]
    STORES_FIELD_NUMBER: _ClassVar[int]
    MAX_RESULTS_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    MIN_SCORE_FIELD_NUMBER: _ClassVar[int]
    RANKING_FIELD_NUMBER: _ClassVar[int]
    query: str
    query_vector: _containers.RepeatedScalarFieldContainer[float]
    stores: _containers.RepeatedScalarFieldContainer[str]
    max_results: int
    scope: Scope
    min_score: float
    ranking: Ranking
    def __init__(self, query: _Optional[str] = ..., query_vector: _Optional[_Iterable[float]] = ..., stores: _Optional[_Iterable[str]] = ..., max_results: _Optional[int] = ..., scope: _Optional[_Union[Scope, _Mapping]] = ..., min_score: _Optional[float] = ..., ranking: _Optional[_Union[Ranking, str]] = ...) -> None: ...

class SearchMemoriesResponse(_message.Message):
    __slots__ = ("results", "ranking")
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    RANKING_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[ScoredMemory]
    ranking: Ranking
    def __init__(self, results: _Optional[_Iterable[_Union[ScoredMemory, _Mapping]]] = ..., ranking: _Optional[_Union[Ranking, str]] = ...) -> None: ...

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
    __slots__ = ("store", "page_size", "page_token", "scope")
    STORE_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    store: str
    page_size: int
    page_token: str
    scope: Scope
    def __init__(self, store: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., scope: _Optional[_Union[Scope, _Mapping]] = ...) -> None: ...

class ListMemoriesResponse(_message.Message):
    __slots__ = ("memories", "next_page_token")
    MEMORIES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    memories: _containers.RepeatedCompositeFieldContainer[Memory]
    next_page_token: str
    def __init__(self, memories: _Optional[_Iterable[_Union[Memory, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class DeleteMemoriesRequest(_message.Message):
    __slots__ = ("ids", "allow_missing")
    IDS_FIELD_NUMBER: _ClassVar[int]
    ALLOW_MISSING_FIELD_NUMBER: _ClassVar[int]
    ids: _containers.RepeatedScalarFieldContainer[str]
    allow_missing: bool
    def __init__(self, ids: _Optional[_Iterable[str]] = ..., allow_missing: _Optional[bool] = ...) -> None: ...

class DeleteMemoriesResponse(_message.Message):
    __slots__ = ("deleted_count",)
    DELETED_COUNT_FIELD_NUMBER: _ClassVar[int]
    deleted_count: int
    def __init__(self, deleted_count: _Optional[int] = ...) -> None: ...
