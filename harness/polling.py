"""The one way the tests wait: for a condition, never for a guessed length of time."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import Literal, TypeVar

T = TypeVar("T")


def wait_for(
    check: Callable[[], T | Literal[False] | None],
    timeout: float,
    *,
    what: str = "the condition",
    retrying: tuple[type[BaseException], ...] = (),
    interval: float = 0.05,
) -> T:
    """`check()`'s first truthy value (so never None nor False), asked every `interval` seconds for up to `timeout`.

    An exception of a type in `retrying` counts as not yet. When time runs out, fails
    the test, naming `what` it waited for and the last value (or error) it saw.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            found = check()
            if found:
                return found
            last: object = found
        except retrying as error:
            last = error
        if time.monotonic() >= deadline:
            raise AssertionError(f"waited {timeout}s for {what}; last saw {last!r}")
        time.sleep(interval)


def stdin_closed() -> threading.Event:
    """An event set once this process's stdin closes: how a probe's parent tells it to stop and report."""
    closed = threading.Event()

    def until_closed() -> None:
        sys.stdin.read()
        closed.set()

    threading.Thread(target=until_closed, daemon=True).start()
    return closed
