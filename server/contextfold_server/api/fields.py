"""The rules of a request's fields, each with its limit: a value that breaks one is refused with
INVALID_ARGUMENT naming the field and why.

These rules are field-local (a value against its pattern and its limit); `requests.py` applies
them, with the rules that span fields, as it turns each request into a value. The limits of
filters are `filtering.py`'s, and those of a large Inject's shape, read before it is parsed,
`shape.py`'s (from the limits here). A rule returns the value it checked or raises; none touches
the database.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence

from google.protobuf import struct_pb2
from google.protobuf.message import Message

from ..errors import InvalidArgument
from ..memory.records import CONTROL_IN_CONTENT, MAX_CONTENT_CHARS, is_memory_id, text_fault

# A conversation longer than this is not one a model takes in a single call.
MAX_MESSAGES = 2000
# Content blocks across a conversation: what bounds the time to parse and read one request.
MAX_CONTENT_BLOCKS = 20_000
MAX_ENTRIES_LIMIT = 100
# Stores a search names, providers an Inject names.
MAX_STORES_NAMED = 100
MAX_PROVIDERS_NAMED = 100
# An Inject's app state goes to every provider it asks: a state, not a store.
MAX_APP_STATE_BYTES = 256 * 1024
MAX_SEARCH_RESULTS = 100
MAX_BATCH = 1000
MAX_DIMENSION = 2000
MAX_PROVIDER_TIMEOUT_MS = 30_000
# A store's description says what it holds, in a paragraph.
MAX_DESCRIPTION_CHARS = 1024
# An entry's metadata, encoded: labels and small values, so one entry always fits a response.
MAX_METADATA_BYTES = 16 * 1024
# Nesting within metadata and app state: objects and lists within each other, this deep at most
# (well inside what a protobuf decoder takes).
MAX_STRUCT_DEPTH = 16
# A search query, and an Inject's agent id and name.
MAX_QUERY_CHARS = MAX_CONTENT_CHARS
# A provider's TLS material (a PEM of certificates, or a key), and its credential header's value.
MAX_PEM_CHARS = 64 * 1024
MAX_CREDENTIAL_CHARS = 4096
# Headers contextfold sets itself, or that HTTP/2 and gRPC keep for themselves.
_RESERVED_HEADERS = frozenset(
    {"x-request-id", "x-contextfold-namespace", "traceparent", "tracestate", "te", "content-type", "user-agent", "host"}
)
_HEADER_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,63}")
_SERVER_NAME = re.compile(r"[A-Za-z0-9.-]{1,253}")
# What a response may take: the 4 MiB that gRPC clients accept by default.
MAX_RESPONSE_BYTES = 4 * 1024 * 1024
MAX_AGENT_FIELD_CHARS = 256

# Store names are shown to the model in the `source` attribute, where they are
# escaped; any printable text is allowed, so long as it has no edge spaces.
_STORE_NAME = re.compile(r"(?=\S)[^\x00-\x1f\x7f]{1,63}(?<=\S)")
_SCOPE_VALUE = re.compile(r"[^\x00-\x1f\x7f]{0,128}")
_PROVIDER_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,62}")
# host:port, [v6]:port, or a gRPC name-resolver URI (dns:, unix:, ipv4:, ipv6:).
_TARGET = re.compile(
    r"(?:(?:dns|unix|unix-abstract|ipv4|ipv6):[^\s\x00-\x1f\x7f]{1,250}"
    r"|(?:\[[0-9A-Fa-f:.]+\]|(?P<name>[A-Za-z0-9.-]{1,253})):\d{1,5})"
)
# A host:port target's host named by name (`_TARGET`'s `name`): labels of 1 to 63 letters, digits and
# hyphens, between dots (a trailing dot allowed).
_DNS_NAME = re.compile(r"(?:[A-Za-z0-9-]{1,63}\.)*[A-Za-z0-9-]{1,63}")
# Control characters: none at all in a line (in stored text, tab and line breaks are text: `CONTROL_IN_CONTENT`).
_CONTROL_IN_LINE = re.compile(r"[\x00-\x1f\x7f]")


def check_count(items: Sequence[object], limit: int, field: str, noun: str) -> None:
    if len(items) > limit:
        raise InvalidArgument.of(field, f"holds {len(items)} {noun}; the limit is {limit}")


def check_content_blocks(blocks: int) -> None:
    """The content blocks across a conversation, counted whole or read shallowly (`shape.py`)."""
    if blocks > MAX_CONTENT_BLOCKS:
        raise InvalidArgument.of("messages", f"hold {blocks} content blocks; the limit is {MAX_CONTENT_BLOCKS}")


def malformed(error: Exception) -> InvalidArgument:
    """The refusal of a request that does not decode as its type."""
    return InvalidArgument.of("request", f"is not a well-formed message of its type: {error}")


def check_store_name(name: str, field: str) -> str:
    if not _STORE_NAME.fullmatch(name):
        raise InvalidArgument.of(
            field,
            "must be 1 to 63 printable characters, not starting or ending with a space"
            + (f", got {name!r}" if name else ", got nothing"),
        )
    return name


def check_store_names(names: Sequence[str], field: str) -> None:
    check_count(names, MAX_STORES_NAMED, field, "store names")
    for index, name in enumerate(names):
        check_store_name(name, f"{field}[{index}]")


def check_memory_id(memory_id: str, field: str) -> str:
    if not is_memory_id(memory_id):
        raise InvalidArgument.of(field, "must be 1 to 128 printable ASCII characters without spaces")
    return memory_id


def check_text(value: str, field: str, limit: int, *, multiline: bool = True) -> str:
    """Text within `limit` characters, with no NUL or other control character (tab and line breaks
    are text, where it may span lines): an entry's content (`check_content`) as `records.text_fault` has it."""
    fault = text_fault(value, limit, CONTROL_IN_CONTENT if multiline else _CONTROL_IN_LINE)
    if fault:
        raise InvalidArgument.of(field, fault)
    return value


def check_content(content: str, field: str) -> str:
    if not content.strip():
        raise InvalidArgument.of(field, "must not be blank")
    return check_text(content, field, MAX_CONTENT_CHARS)


def check_query(query: str, field: str) -> str:
    return check_text(query, field, MAX_QUERY_CHARS)


def check_description(description: str, field: str) -> str:
    return check_text(description, field, MAX_DESCRIPTION_CHARS)


def check_struct(value: struct_pb2.Struct, field: str, max_bytes: int) -> struct_pb2.Struct:
    """Metadata or app state: within its size and `MAX_STRUCT_DEPTH`, every number finite (JSON
    has no NaN or infinity), every key and string free of control characters but tab and line breaks."""
    size = value.ByteSize()
    if size > max_bytes:
        raise InvalidArgument.of(field, f"takes {size} bytes encoded; the limit is {max_bytes}")
    # Depth first, without recursion: the depth is checked before it is followed.
    pending: list[tuple[struct_pb2.Struct | struct_pb2.ListValue, str, int]] = [(value, field, 1)]
    while pending:
        container, path, depth = pending.pop()
        if depth > MAX_STRUCT_DEPTH:
            raise InvalidArgument.of(path, f"nests more than {MAX_STRUCT_DEPTH} levels of objects and lists")
        items: Iterable[tuple[str, struct_pb2.Value]]
        if isinstance(container, struct_pb2.Struct):
            items = ((f"{path}.{key}", item) for key, item in container.fields.items())
            for key in container.fields:
                check_text(key, f"{path} key {key[:40]!r}", max_bytes)
        else:
            items = ((f"{path}[{index}]", item) for index, item in enumerate(container.values))
        for item_path, item in items:
            kind = item.WhichOneof("kind")
            if kind == "number_value" and not math.isfinite(item.number_value):
                raise InvalidArgument.of(item_path, f"must be a finite number, got {item.number_value}")
            if kind == "string_value":
                check_text(item.string_value, item_path, max_bytes)
            elif kind == "struct_value":
                pending.append((item.struct_value, item_path, depth + 1))
            elif kind == "list_value":
                pending.append((item.list_value, item_path, depth + 1))
    return value


def check_vector(vector: Sequence[float], field: str) -> None:
    if len(vector) > MAX_DIMENSION:
        raise InvalidArgument.of(field, f"holds {len(vector)} numbers; a vector has at most {MAX_DIMENSION}")
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


def check_provider_names(names: Sequence[str], field: str, reserved: Sequence[str]) -> None:
    """The providers an Inject names: each by the rule every provider name follows, each once, within the cap."""
    check_count(names, MAX_PROVIDERS_NAMED, field, "provider names")
    seen: set[str] = set()
    for index, name in enumerate(names):
        check_provider_name(name, f"{field}[{index}]", reserved)
        if name in seen:
            raise InvalidArgument.of(field, f"names provider {name!r} more than once")
        seen.add(name)


def check_target(target: str, field: str) -> str:
    port = target.rsplit(":", 1)[-1]
    matched = _TARGET.fullmatch(target)
    if not matched or (port.isdigit() and not 0 < int(port) < 65536):
        raise InvalidArgument.of(field, "must be host:port, [ipv6]:port, or a dns:, unix:, ipv4: or ipv6: target")
    host = matched.group("name")
    if host is not None and not _DNS_NAME.fullmatch(host.removesuffix(".")):
        raise InvalidArgument.of(field, f"{host!r} is not a host name: labels of 1 to 63 characters, between dots")
    return target


def check_pem(pem: str, field: str, kind: str) -> str:
    """A PEM block of `kind` ("CERTIFICATE" or "PRIVATE KEY"), or nothing."""
    check_text(pem, field, MAX_PEM_CHARS)
    if pem and f"-----BEGIN {kind}" not in pem and not (kind == "PRIVATE KEY" and "PRIVATE KEY-----" in pem):
        raise InvalidArgument.of(field, f"must be PEM ({kind})")
    return pem


def check_server_name(name: str, field: str) -> str:
    if name and not _SERVER_NAME.fullmatch(name):
        raise InvalidArgument.of(field, "must be a host name")
    return name


def check_credential(header: str, value: str, field: str) -> tuple[str, str]:
    """A header to send to a provider: a lowercase name of its own, and a value of printable ASCII."""
    if not _HEADER_NAME.fullmatch(header):
        raise InvalidArgument.of(f"{field}.header", "must be 1 to 64 lowercase letters, digits or '-'")
    if header in _RESERVED_HEADERS or header.startswith("grpc-") or header.endswith("-bin"):
        raise InvalidArgument.of(f"{field}.header", f"{header!r} is a header contextfold or gRPC sets itself")
    if not value or len(value) > MAX_CREDENTIAL_CHARS or not all(" " <= c <= "~" for c in value):
        raise InvalidArgument.of(f"{field}.value", f"must be 1 to {MAX_CREDENTIAL_CHARS} printable ASCII characters")
    return header, value


def check_provider_timeout(milliseconds: int, field: str) -> int:
    if not 1 <= milliseconds <= MAX_PROVIDER_TIMEOUT_MS:
        raise InvalidArgument.of(field, f"must be from 1ms to {MAX_PROVIDER_TIMEOUT_MS // 1000}s")
    return milliseconds
