"""Sealing: encrypt and authenticate small values with a key of the service's, from the standard library.

The cipher is HMAC-SHA256 in counter mode over a random nonce, then HMAC-SHA256 over
nonce and ciphertext (encrypt-then-MAC), with the two keys derived from the service's
secret and a label, so each use (page tokens, provider secrets) has keys of its own.
A sealed value shows nothing of what it holds, and one altered or made without the
key does not open.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

_NONCE_BYTES = 12
_TAG_BYTES = 16


class Sealer:
    def __init__(self, secret: bytes, label: str) -> None:
        self._encrypting = hmac.new(secret, f"contextfold {label}: encrypt".encode(), hashlib.sha256).digest()
        self._signing = hmac.new(secret, f"contextfold {label}: sign".encode(), hashlib.sha256).digest()

    def seal(self, plain: bytes) -> bytes:
        nonce = secrets.token_bytes(_NONCE_BYTES)
        body = nonce + _xor(plain, self._keystream(nonce, len(plain)))
        return body + self._tag(body)

    def open(self, sealed: bytes) -> bytes:
        """What `sealed` holds; ValueError when it was not sealed with this key, or was altered."""
        body, tag = sealed[:-_TAG_BYTES], sealed[-_TAG_BYTES:]
        if len(body) < _NONCE_BYTES or not hmac.compare_digest(tag, self._tag(body)):
            raise ValueError("not sealed with this key")
        nonce, ciphertext = body[:_NONCE_BYTES], body[_NONCE_BYTES:]
        return _xor(ciphertext, self._keystream(nonce, len(ciphertext)))

    def _keystream(self, nonce: bytes, length: int) -> bytes:
        blocks = (
            hmac.new(self._encrypting, nonce + counter.to_bytes(4, "big"), hashlib.sha256).digest()
            for counter in range((length + 31) // 32)
        )
        return b"".join(blocks)[:length]

    def _tag(self, body: bytes) -> bytes:
        return hmac.new(self._signing, body, hashlib.sha256).digest()[:_TAG_BYTES]


def _xor(data: bytes, keystream: bytes) -> bytes:
    return (int.from_bytes(data, "big") ^ int.from_bytes(keystream, "big")).to_bytes(len(data), "big")


def derived_key(secret: bytes, label: str) -> bytes:
    """A key of its own for one use of the service's secret (`label`): what one use computes with it says
    nothing of another's."""
    return keyed_digest(secret, f"contextfold {label}: key")


def keyed_digest(key: bytes, *parts: str) -> bytes:
    """HMAC-SHA256 of `parts` (joined by NUL, which no part holds) under `key`: a hash of values that only
    the key's holder can compute, so nobody can test a guess of the values against it."""
    return hmac.new(key, "\x00".join(parts).encode(), hashlib.sha256).digest()
