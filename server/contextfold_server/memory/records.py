"""What memory holds, as values: stores, entries, their changes and versions, a search's candidates.

These are the records the adapters return and the servicers render; they know nothing of SQL
(`statements.py`) or of the wire (`api/`).
"""

from __future__ import annotations

import base64
import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from ..access.sealing import keyed_digest

_MEMORY_ID = re.compile(r"[\x21-\x7e]{1,128}")
# An entry is a fact to recall, not a document: 16 KiB of text (the model reads the first 256 tokens).
MAX_CONTENT_CHARS = 16_384
# What an entry's content may not hold: a NUL (Postgres' text holds none) or another control character
# but tab and line breaks (an export imports again).
CONTROL_IN_CONTENT = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def is_memory_id(value: str) -> bool:
    """Ids are 1 to 128 printable ASCII characters without spaces."""
    return bool(_MEMORY_ID.fullmatch(value))


def text_fault(text: str, limit: int | None = None, control: re.Pattern[str] = CONTROL_IN_CONTENT) -> str:
    """Why `text` is refused where it may hold `limit` characters (None: any number) and none that
    `control` matches (by default, what an entry's content may hold), or "" when it is not."""
    if limit is not None and len(text) > limit:
        return f"holds {len(text)} characters; the limit is {limit}"
    found = control.search(text)
    if found:
        return f"must not contain control characters; found {found.group()!r} at {found.start()}"
    return ""


@dataclass(frozen=True)
class Scope:
    user_id: str = ""
    agent_id: str = ""
    session_id: str = ""

    def fields(self) -> dict[str, str]:
        """The fields that are set, by column: a statement filters on these, as parameters."""
        return {column: value for column, value in vars(self).items() if value}

    @property
    def has_neighbours(self) -> bool:
        """Whether an entry of this scope can have neighbours (entries written just before and after it): in
        a session, or with an author (a user, an agent) to order by; as `statements._BESIDE` reads them."""
        return bool(self.session_id or self.user_id or self.agent_id)


UNSCOPED = Scope()


@dataclass(frozen=True)
class StoreRecord:
    name: str
    description: str
    dimension: int
    create_time: datetime
    memory_count: int = 0
    # Entries added without an expiry expire this long after; None: never.
    default_ttl: timedelta | None = None


@dataclass(frozen=True)
class NewMemory:
    content: str
    vector: Sequence[float]
    id: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    scope: Scope = Scope()
    # None: the store's default time-to-live after it is added, or never.
    expire_time: datetime | None = None
    # Whether the server's model made `vector`: its sentences are then embedded too, after (memory/sentences.py).
    embedded: bool = False


@dataclass(frozen=True)
class MemoryRecord:
    id: str
    store: str
    content: str
    metadata: dict[str, Any]
    scope: Scope
    create_time: datetime
    seq: int
    # None until the first update.
    update_time: datetime | None = None
    expire_time: datetime | None = None
    version: int = 1
    # What its etag is keyed with (the service's key): the etag is made when asked for, so only for the
    # entries a caller is shown, not for every candidate a search weighs.
    etag_key: bytes = field(default=b"", repr=False, compare=False)

    @functools.cached_property
    def etag(self) -> str:
        """Changes with every update, and differs for an entry deleted and added again under its id;
        opaque (`etag_of`): it tells its holder nothing of other entries or tenants."""
        return etag_of(self.etag_key, self.id, self.seq, self.version)


def etag_of(etag_key: bytes, memory_id: str, seq: int, version: int) -> str:
    """An entry's etag: a keyed hash of its id, its row (`seq`, new for an entry deleted and added again)
    and its version, so it changes with every update while telling nothing: `seq` counts every
    tenant's writes, and an etag must not publish it."""
    digest = keyed_digest(etag_key, memory_id, str(seq), str(version))
    return base64.urlsafe_b64encode(digest[:16]).decode().rstrip("=")


@dataclass(frozen=True)
class ImportedMemory:
    """An entry as ExportMemories wrote it: its own id, store, vector and times."""

    memory: NewMemory
    store: str
    create_time: datetime | None
    update_time: datetime | None


@dataclass(frozen=True)
class MemoryVersion:
    """What an update replaced: the entry's fields in `version`, and when and by whom it was replaced."""

    version: int
    memory: MemoryRecord
    replace_time: datetime
    replaced_by: str


# The fields UpdateMemory may change, by their name in an update mask.
UPDATABLE = ("content", "metadata", "user_id", "agent_id", "session_id", "vector", "expire_time")


@dataclass(frozen=True)
class MemoryChange:
    """An update: the new values of the fields in `fields` (names from `UPDATABLE`)."""

    fields: frozenset[str]
    content: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    scope: Scope = Scope()
    vector: Sequence[float] = ()
    expire_time: datetime | None = None
    # Whether the server's model made `vector` (`NewMemory.embedded`).
    embedded: bool = False


@dataclass(frozen=True)
class ScoredRecord:
    """An entry a search found, and its similarity to the query: what rankings weigh (`engine.ranking.Ranked`)."""

    memory: MemoryRecord
    score: float

    @property
    def id(self) -> str:
        return self.memory.id

    @property
    def store(self) -> str:
        return self.memory.store

    @property
    def content(self) -> str:
        return self.memory.content


@dataclass(frozen=True)
class Candidate(ScoredRecord):
    """An entry a ranking weighs, as the search read it: for one the full-text search found, the weight
    of the query's words it holds (its BM25 share for the default, its rare words' for hybrid; None for
    the vector search's); for one found nearest to a part of a question that asks several things
    (`Asked.parts`), that part's number from 1, its score the similarity to that part; for one found by its
    sentences (migration 24), its best sentence's similarity (`sentence`), its score its own."""

    lexical: float | None = None
    part: int = 0
    sentence: float | None = None


@dataclass
class Neighbours:
    """Neighbours (in a session, or an author's order) as a read found them: each (the id it is beside, the
    neighbour), and the ids whose neighbours the read looked for (`covered`: those with none included)."""

    pairs: list[tuple[str, Candidate]] = field(default_factory=list)
    covered: set[str] = field(default_factory=set)

    def of(self, ids: Sequence[str]) -> tuple[list[Candidate], dict[str, set[str]]]:
        """The neighbours of `ids` (each once), and which entries are beside which, both ways."""
        wanted = set(ids)
        found: dict[str, Candidate] = {}
        beside: dict[str, set[str]] = {}
        for seed, neighbour in self.pairs:
            if seed in wanted:
                found.setdefault(neighbour.id, neighbour)
                beside.setdefault(seed, set()).add(neighbour.id)
                beside.setdefault(neighbour.id, set()).add(seed)
        return list(found.values()), beside


class ScopedIds:
    """The ids a key bound to a scope gives the entries it adds: its own.

    Ids are unique in a namespace, so an id another user's entry holds would otherwise tell a bound key
    so (an add refused where a free id is taken). A bound key's id for a new entry is therefore made its
    scope's own: the id it gave, then `~` and a keyed hash of its scope and that id (the service's key,
    so nobody can make another scope's). The same id from the same scope always makes the same entry id,
    so adds and upserts stay retry-safe; an id already held within the key's own scope is that entry's.
    """

    def __init__(self, key: bytes) -> None:
        self._key = key

    def own(self, scope: Scope, memory_id: str) -> str:
        digest = keyed_digest(self._key, scope.user_id, scope.agent_id, memory_id)
        tag = base64.b32encode(digest[:10]).decode().lower()
        # Within the 128 characters an id may have: the given id, cut if it must be, then the tag.
        return f"{memory_id[: 128 - len(tag) - 1]}~{tag}"
