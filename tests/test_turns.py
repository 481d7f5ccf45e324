"""The thread a worker does large requests' ranking work on, taken in turns per tenant (`TenantThread`)."""

from __future__ import annotations

import asyncio
import threading

import pytest
from contextfold_server.turns import TenantThread


async def _queued(thread: TenantThread, callers: list[tuple[str, str]], held: threading.Event) -> list[str]:
    """The order in which `callers` (namespace, name) got their turns, each queued while a first call of
    namespace "a" holds the thread until `held` is set."""
    done: list[str] = []

    def work(name: str, wait: bool = False) -> str:
        if wait:
            held.wait(10)
        done.append(name)
        return name

    first = asyncio.ensure_future(thread.run("a", work, "a0", True))
    await asyncio.sleep(0.05)
    rest = []
    for namespace, name in callers:
        rest.append(asyncio.ensure_future(thread.run(namespace, work, name)))
        await asyncio.sleep(0)
    held.set()
    assert await first == "a0"
    assert [await task for task in rest] == [name for _, name in callers]
    return done


def test_a_tenant_with_many_queued_delays_another_by_the_one_it_is_running() -> None:
    order = asyncio.run(
        _queued(
            TenantThread("test"), [("a", "a1"), ("a", "a2"), ("a", "a3"), ("b", "b1"), ("c", "c1")], threading.Event()
        )
    )
    assert order == ["a0", "b1", "c1", "a1", "a2", "a3"]


def test_tenants_take_turns_one_call_each_while_each_has_more_waiting() -> None:
    callers = [("a", "a1"), ("a", "a2"), ("b", "b1"), ("b", "b2"), ("c", "c1")]
    order = asyncio.run(_queued(TenantThread("test"), callers, threading.Event()))
    assert order == ["a0", "b1", "c1", "a1", "b2", "a2"]


def test_a_caller_that_stops_waiting_gives_up_its_turn_and_holds_no_other() -> None:
    async def scenario() -> list[str]:
        thread, held, done = TenantThread("test"), threading.Event(), []

        def work(name: str) -> str:
            if name == "a0":
                held.wait(10)
            done.append(name)
            return name

        first = asyncio.ensure_future(thread.run("a", work, "a0"))
        await asyncio.sleep(0.05)
        gone = asyncio.ensure_future(thread.run("b", work, "b1"))
        kept = asyncio.ensure_future(thread.run("c", work, "c1"))
        await asyncio.sleep(0)
        gone.cancel()
        held.set()
        await first
        assert await kept == "c1"
        with pytest.raises(asyncio.CancelledError):
            await gone
        # The thread is free again: a call made now runs at once.
        assert await asyncio.wait_for(thread.run("b", work, "b2"), 5) == "b2"
        return done

    assert asyncio.run(scenario()) == ["a0", "c1", "b2"]


def test_work_that_raises_raises_in_its_caller_and_passes_the_turn_on() -> None:
    async def scenario() -> None:
        thread = TenantThread("test")

        def fails() -> None:
            raise ValueError("bad")

        with pytest.raises(ValueError, match="bad"):
            await thread.run("a", fails)
        assert await asyncio.wait_for(thread.run("a", lambda: "next"), 5) == "next"

    asyncio.run(scenario())
