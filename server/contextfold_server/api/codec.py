"""A method's request decoding and response encoding, done by contextfold rather than by gRPC.

Decoding here makes a message that does not parse the caller's INVALID_ARGUMENT (gRPC would answer
UNKNOWN, naming a Python exception). protobuf's C parser holds the interpreter for a whole message,
on whatever thread it runs, so a thread would not free the event loop: what bounds a worker's time
instead is the request size limit and the caps on what a request holds, checked on a large Inject
before it is parsed (`shape.py`), and bulk calls, whose requests are the large ones, are decoded by
the bulk workers, never by a worker (`lanes.py`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from google.protobuf.message import DecodeError

from .fields import malformed


class Codec:
    def __init__(
        self,
        decode: Callable[[bytes], Any],
        encode: Callable[[Any], bytes],
        check_shape: Callable[[bytes], None] | None = None,
    ) -> None:
        self._decode = decode
        self._encode = encode
        self._check_shape = check_shape

    def decode(self, data: bytes) -> Any:
        if self._check_shape is not None:
            self._check_shape(data)
        try:
            return self._decode(data)
        except DecodeError as error:
            raise malformed(error) from None

    def encode(self, response: Any) -> bytes:
        return self._encode(response)
