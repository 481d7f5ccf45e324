"""How late the event loop runs: the sign that something held it, and every call waited.

A task asks to wake every `interval` seconds and measures how late it woke. A
late wake means the loop was busy (or starved of a core) for that long, and
every call on this worker waited with it. Each measurement goes to a histogram;
the last few seconds of them are kept so the call pipeline can say, in a call's
log line, when that call waited on a busy loop.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable

INTERVAL = 0.025
# A stall this long is worth a word in the call's log line.
NOTEWORTHY = 0.02
_KEPT = 400


class LoopLagMonitor:
    def __init__(self, observe: Callable[[float], None], interval: float = INTERVAL) -> None:
        self._observe = observe
        self._interval = interval
        # (when the loop woke the monitor, how late), for the last _KEPT wakes.
        self._wakes: deque[tuple[float, float]] = deque(maxlen=_KEPT)
        # When the loop last woke the monitor late enough to be worth a word: most calls see none.
        self._last_stall = float("-inf")
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._watch(), name="loop-lag")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _watch(self) -> None:
        while True:
            asked = time.perf_counter()
            await asyncio.sleep(self._interval)
            woke = time.perf_counter()
            lag = max(0.0, woke - asked - self._interval)
            self._wakes.append((woke, lag))
            if lag >= NOTEWORTHY:
                self._last_stall = woke
            self._observe(lag)

    def stall_during(self, started: float, ended: float) -> float:
        """The longest stall that overlapped [started, ended] (perf_counter times), in seconds.

        A call that arrived while the loop was held starts right as it is let go, so a
        stall that ended a moment before the call started counts too. Only stalls worth a
        word are looked for: when none happened since the call began, the answer is 0 at once.
        """
        if self._last_stall < started - 2 * self._interval:
            return 0.0
        return max(
            (lag for woke, lag in self._wakes if woke >= started - 2 * self._interval and woke - lag <= ended),
            default=0.0,
        )
