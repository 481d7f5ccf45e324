"""Names and messages the tests and benchmarks make: unique names, and turns of a conversation."""

from __future__ import annotations

import uuid


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def user(text: str) -> dict:
    return {"role": "user", "content": [{"text": text}]}


def assistant(text: str) -> dict:
    return {"role": "assistant", "content": [{"text": text}]}
