"""Pagination (AIP-158): page sizes, pages that always fit a response, and signed page tokens.

A page holds at most the size asked for, and fewer when its items are large: a
response stays within `MAX_PAGE_BYTES`, under the 4 MiB that gRPC clients
accept by default, whatever was stored. A page token is the position its page
ended on, bound to the request it came from, encrypted and signed with a key
every replica shares (kept in the database): it tells its holder nothing, works
on any replica, and one that was forged or altered is refused with INVALID_ARGUMENT.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from google.protobuf.message import Message

from ..access.sealing import Sealer
from ..errors import InvalidArgument
from .call import CALL

Record = TypeVar("Record")
Item = TypeVar("Item", bound=Message)

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 1000
# What a page's items may take, encoded; the rest of a response is small.
MAX_PAGE_BYTES = 3 * 1024 * 1024
# An item's field tag and length, besides its own bytes.
_ITEM_OVERHEAD = 6


def page_size(requested: int, field: str = "page_size") -> int:
    if requested < 0:
        raise InvalidArgument.of(field, f"must not be negative, got {requested}")
    return min(requested or DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)


def fitting(items: Sequence[Message], budget: int = MAX_PAGE_BYTES) -> int:
    """How many of `items`, from the first, fit in `budget` bytes: always at least one (every item
    fits on its own: what is stored is bounded so that it does)."""
    total = 0
    for count, item in enumerate(items):
        total += item.ByteSize() + _ITEM_OVERHEAD
        if total > budget and count > 0:
            return count
    return len(items)


class PageTokens:
    """Makes and reads page tokens: sealed (`access/sealing.py`), so a token tells its holder nothing
    (a position is a row sequence every tenant's writes advance) and only the service makes them."""

    def __init__(self, secret: bytes) -> None:
        self._sealer = Sealer(secret, "page tokens")

    def encode(self, after: Any, *request_parts: str) -> str:
        """A token for the page after `after`, bound to the request's parts and the caller's namespace."""
        key = _request_key(CALL.get().namespace, *request_parts)
        payload = json.dumps({"after": after, "key": key}, separators=(",", ":")).encode()
        return _b64(self._sealer.seal(payload))

    def page(
        self,
        records: Sequence[Record],
        limit: int,
        to_proto: Callable[[Record], Item],
        position: Callable[[Record], Any],
        *request_parts: str,
    ) -> tuple[list[Item], str]:
        """A page of `records` (fetched one past `limit`, to tell whether more follow): the items that
        fit (`fitting`), and the token for the page after them, empty on the last page."""
        items = [to_proto(record) for record in records[:limit]]
        kept = fitting(items)
        token = self.encode(position(records[kept - 1]), *request_parts) if len(records) > kept else ""
        return items[:kept], token

    def decode(self, token: str, is_position: Callable[[Any], bool], *request_parts: str) -> Any:
        """The position a page ended on, or None for the first page. `is_position` checks its shape."""
        if not token:
            return None
        try:
            decoded = json.loads(self._sealer.open(_unb64(token)))
        except ValueError:
            raise _not_ours() from None
        if not is_position(decoded["after"]):
            raise _not_ours()
        if decoded["key"] != _request_key(CALL.get().namespace, *request_parts):
            raise InvalidArgument.of("page_token", "belongs to a request with other parameters")
        return decoded["after"]


def _request_key(*parts: str) -> str:
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:16]


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    if not text.isascii():
        raise ValueError("not base64")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _not_ours() -> InvalidArgument:
    return InvalidArgument.of("page_token", "is not a token this service issued")
