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
import hmac
import json
import secrets
from collections.abc import Callable, Sequence
from typing import Any

from google.protobuf.message import Message

from ..errors import InvalidArgument

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
    """Makes and reads page tokens: encrypted, so a token tells its holder nothing (a position is a
    row sequence every tenant's writes advance), and authenticated, so only the service makes them.

    The cipher is HMAC-SHA256 in counter mode over a random nonce, then HMAC-SHA256 over nonce and
    ciphertext (encrypt-then-MAC), with keys derived from the service's secret: the standard
    library's primitives, no more.
    """

    def __init__(self, key: bytes) -> None:
        self._encrypting = hmac.new(key, b"contextfold page tokens: encrypt", hashlib.sha256).digest()
        self._signing = hmac.new(key, b"contextfold page tokens: sign", hashlib.sha256).digest()

    def encode(self, after: Any, *request_parts: str) -> str:
        payload = json.dumps({"after": after, "key": _request_key(*request_parts)}, separators=(",", ":")).encode()
        nonce = secrets.token_bytes(_NONCE_BYTES)
        sealed = nonce + _xor(payload, self._keystream(nonce, len(payload)))
        return f"{_b64(sealed)}.{_b64(self._signature(sealed))}"

    def decode(self, token: str, is_position: Callable[[Any], bool], *request_parts: str) -> Any:
        """The position a page ended on, or None for the first page. `is_position` checks its shape."""
        if not token:
            return None
        encoded_sealed, _, encoded_signature = token.partition(".")
        try:
            sealed = _unb64(encoded_sealed)
            signature = _unb64(encoded_signature)
        except ValueError:
            raise _not_ours() from None
        if len(sealed) <= _NONCE_BYTES or not hmac.compare_digest(signature, self._signature(sealed)):
            raise _not_ours()
        nonce, ciphertext = sealed[:_NONCE_BYTES], sealed[_NONCE_BYTES:]
        decoded = json.loads(_xor(ciphertext, self._keystream(nonce, len(ciphertext))))
        if not is_position(decoded["after"]):
            raise _not_ours()
        if decoded["key"] != _request_key(*request_parts):
            raise InvalidArgument.of("page_token", "belongs to a request with other parameters")
        return decoded["after"]

    def _keystream(self, nonce: bytes, length: int) -> bytes:
        blocks = (
            hmac.new(self._encrypting, nonce + counter.to_bytes(4, "big"), hashlib.sha256).digest()
            for counter in range((length + 31) // 32)
        )
        return b"".join(blocks)[:length]

    def _signature(self, sealed: bytes) -> bytes:
        return hmac.new(self._signing, sealed, hashlib.sha256).digest()[:16]


_NONCE_BYTES = 12


def _xor(data: bytes, keystream: bytes) -> bytes:
    return bytes(a ^ b for a, b in zip(data, keystream, strict=True))


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
