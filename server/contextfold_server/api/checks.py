"""Request checks: each field against its rule and its limit, refused with INVALID_ARGUMENT naming it.

Every limit a request is held to is here, so the README's limits and the
service's cannot drift apart. A check either returns the value it checked
(sometimes normalized) or raises; it never touches the database.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from google.protobuf.message import Message

from ..errors import InvalidArgument
from ..memory.store import is_memory_id

# A conversation longer than this is not one a model takes in a single call.
MAX_MESSAGES = 2000
MAX_ENTRIES_LIMIT = 100
MAX_SEARCH_RESULTS = 100
MAX_BATCH = 1000
# An entry is a fact to recall, not a document: 16 KiB of text (the model reads the first 256 tokens).
MAX_CONTENT_CHARS = 16_384
MAX_DIMENSION = 2000
MAX_PROVIDER_TIMEOUT_MS = 30_000

# Store names are shown to the model in the `source` attribute, where they are
# escaped; any printable text is allowed, so long as it has no edge spaces.
_STORE_NAME = re.compile(r"(?=\S)[^\x00-\x1f\x7f]{1,63}(?<=\S)")
_SCOPE_VALUE = re.compile(r"[^\x00-\x1f\x7f]{0,128}")
_PROVIDER_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,62}")
# host:port, [v6]:port, or a gRPC name-resolver URI (dns:, unix:, ipv4:, ipv6:).
_TARGET = re.compile(
    r"(?:(?:dns|unix|unix-abstract|ipv4|ipv6):\S{1,250}|(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]{1,253}):\d{1,5})"
)


def check_count(items: Sequence[object], limit: int, field: str, noun: str) -> None:
    if len(items) > limit:
        raise InvalidArgument.of(field, f"holds {len(items)} {noun}; the limit is {limit}")


def check_store_name(name: str, field: str) -> str:
    if not _STORE_NAME.fullmatch(name):
        raise InvalidArgument.of(
            field,
            "must be 1 to 63 printable characters, not starting or ending with a space"
            + (f", got {name!r}" if name else ", got nothing"),
        )
    return name


def check_store_names(names: Sequence[str], field: str) -> None:
    for index, name in enumerate(names):
        check_store_name(name, f"{field}[{index}]")


def check_memory_id(memory_id: str, field: str) -> str:
    if not is_memory_id(memory_id):
        raise InvalidArgument.of(field, "must be 1 to 128 printable ASCII characters without spaces")
    return memory_id


def check_content(content: str, field: str) -> str:
    if not content.strip():
        raise InvalidArgument.of(field, "must not be blank")
    if "\x00" in content:
        raise InvalidArgument.of(field, "must not contain NUL characters")
    if len(content) > MAX_CONTENT_CHARS:
        raise InvalidArgument.of(field, f"holds {len(content)} characters; the limit is {MAX_CONTENT_CHARS}")
    return content


def check_vector(vector: Sequence[float], field: str) -> None:
    # Protobuf floats are 32-bit, so a sum of finite ones cannot overflow: it is finite
    # exactly when every element is (an inf or a NaN carries through; +inf and -inf make NaN).
    if vector and not math.isfinite(sum(vector)):
        raise InvalidArgument.of(field, "must hold finite numbers only")
    if vector and not any(vector):
        raise InvalidArgument.of(field, "must not be all zeros: it has no direction to compare")


def check_dimension(dimension: int, field: str) -> int:
    if not 1 <= dimension <= MAX_DIMENSION:
        raise InvalidArgument.of(field, f"must be from 1 to {MAX_DIMENSION} (the HNSW limit), got {dimension}")
    return dimension


def check_min_score(message: Message, field: str) -> float | None:
    """The optional `min_score` of `message` (a search or memory options), if set."""
    if not message.HasField("min_score"):
        return None
    score = float(getattr(message, "min_score"))  # noqa: B009 - the field is on several message types
    if not -1.0 <= score <= 1.0:
        raise InvalidArgument.of(field, f"must be from -1 to 1, got {score}")
    return score


def check_max_entries(value: int, field: str) -> int:
    if not 0 <= value <= MAX_ENTRIES_LIMIT:
        raise InvalidArgument.of(field, f"must be from 0 to {MAX_ENTRIES_LIMIT}, got {value}")
    return value


def check_max_results(value: int, field: str) -> int:
    if not 0 <= value <= MAX_SEARCH_RESULTS:
        raise InvalidArgument.of(field, f"must be from 0 to {MAX_SEARCH_RESULTS}")
    return value


def check_max_tokens(value: int, field: str) -> int:
    if value < 0:
        raise InvalidArgument.of(field, f"must not be negative, got {value}")
    return value


def check_scope_value(value: str, field: str) -> str:
    if not _SCOPE_VALUE.fullmatch(value):
        raise InvalidArgument.of(field, "must be at most 128 characters, none of them control characters")
    return value


def check_provider_name(name: str, field: str, reserved: Sequence[str]) -> str:
    if not _PROVIDER_NAME.fullmatch(name):
        raise InvalidArgument.of(field, "must be 1 to 63 letters, digits, '_' or '-', starting with a letter")
    if name in reserved:
        raise InvalidArgument.of(field, f"{name!r} is reserved for contextfold's own blocks")
    return name


def check_target(target: str, field: str) -> str:
    port = target.rsplit(":", 1)[-1]
    if not _TARGET.fullmatch(target) or (port.isdigit() and not 0 < int(port) < 65536):
        raise InvalidArgument.of(field, "must be host:port, [ipv6]:port, or a dns:, unix:, ipv4: or ipv6: target")
    return target


def check_provider_timeout(milliseconds: int, field: str) -> int:
    if not 1 <= milliseconds <= MAX_PROVIDER_TIMEOUT_MS:
        raise InvalidArgument.of(field, f"must be from 1ms to {MAX_PROVIDER_TIMEOUT_MS // 1000}s")
    return milliseconds


def one_of(field: str, other: str, both_set: bool) -> None:
    """Refuse a request that sets `field` and the `other` field it replaces."""
    if both_set:
        raise InvalidArgument.of(field, f"replaces {other}; set one of them, not both")
