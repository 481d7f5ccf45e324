"""Pagination (AIP-158): page sizes, and page tokens bound to the request they came from."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable
from typing import Any

from ..errors import InvalidArgument

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 1000


def page_size(requested: int, field: str = "page_size") -> int:
    if requested < 0:
        raise InvalidArgument.of(field, f"must not be negative, got {requested}")
    return min(requested or DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)


def _request_key(*parts: str) -> str:
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:16]


def encode_page_token(after: Any, *request_parts: str) -> str:
    payload = json.dumps({"after": after, "key": _request_key(*request_parts)})
    return base64.urlsafe_b64encode(payload.encode()).decode().rstrip("=")


def decode_page_token(token: str, is_position: Callable[[Any], bool], *request_parts: str) -> Any:
    """The position a page ended on, or None for the first page. `is_position` checks its shape:
    a token is opaque to callers, not tamper-proof, so what comes back is checked like any input."""
    if not token:
        return None
    try:
        padded = token + "=" * (-len(token) % 4)
        payload = json.loads(base64.urlsafe_b64decode(padded.encode()))
        after, key = payload["after"], payload["key"]
    except (ValueError, KeyError, TypeError) as error:
        raise InvalidArgument.of("page_token", "is not a token this service issued") from error
    if not is_position(after):
        raise InvalidArgument.of("page_token", "is not a token this service issued")
    if key != _request_key(*request_parts):
        raise InvalidArgument.of("page_token", "belongs to a request with other parameters")
    return after
