"""The thread a worker does its requests' large work on, taken in turns per tenant (`TenantThread`), and a long
text's tokens counted there a piece at a turn (`tokens`)."""

from __future__ import annotations

import asyncio
import base64
import json
import random
import statistics
import string
import sys
import threading
import time

import pytest
from contextfold_server.engine.entries import RetrievedEntry
from contextfold_server.engine.format import format_memory_block
from contextfold_server.tokens import (
    LONGEST_PIECE,
    PIECE,
    REMEMBERED_LINE,
    CallTokens,
    LineCounts,
    count_tokens,
    count_tokens_in_turns,
    lines,
    pieces,
)
from contextfold_server.turns import SWITCH_INTERVAL, TenantThread, share_the_interpreter


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


# Texts that try the places a count could be cut: blank space of each kind, line ends, contractions, numbers,
# punctuation, letters of other scripts, and text that spells a special token.
_ALPHABET = [
    *"abcXYZ019'.,!?-_()<>/\"", "\u2019", " ", " ", "  ", "\n", "\r\n", "\n\n", "\t", "\u00a0", "\u00e9", "\u00df",
    "\u4e2d", "\U0001f600", "\u00bd", "'s", "'ll", " 's", "\x1c", "\u2028", "\u3000", "<|endoftext|>",
]  # fmt: skip


def _loop_steps_while_the_thread_computes() -> float:
    """How late, at the median, an event loop comes back from waiting a millisecond (as it waits for a socket, the
    interpreter left to other threads meanwhile) while the worker's thread computes, holding the interpreter."""

    def compute(seconds: float) -> int:
        ends, spun = time.perf_counter() + seconds, 0
        while time.perf_counter() < ends:
            spun += 1
        return spun

    async def scenario() -> float:
        thread = TenantThread("computing")
        computing = asyncio.ensure_future(thread.run("heavy", compute, 0.5))
        await asyncio.sleep(0.05)  # the thread under way
        steps = []
        while not computing.done() and len(steps) < 60:
            started = time.perf_counter()
            await asyncio.sleep(0.001)
            steps.append(time.perf_counter() - started - 0.001)
        await computing
        return statistics.median(steps)

    return asyncio.run(scenario())


def test_a_worker_s_event_loop_waits_a_fraction_of_the_default_for_the_interpreter_while_its_thread_computes() -> None:
    """The interpreter's default switch interval (5 ms) is what each of the loop's steps waited for the interpreter
    while the worker's thread computed for another tenant; a worker sets `SWITCH_INTERVAL` (`share_the_interpreter`)."""
    before = sys.getswitchinterval()
    try:
        sys.setswitchinterval(0.005)
        by_default = _loop_steps_while_the_thread_computes()
        share_the_interpreter()
        assert sys.getswitchinterval() == pytest.approx(SWITCH_INTERVAL)
        shared = _loop_steps_while_the_thread_computes()
    finally:
        sys.setswitchinterval(before)
    assert by_default > 0.003, by_default
    assert shared < by_default / 2, (shared, by_default)


def test_a_long_text_s_tokens_are_the_sum_of_its_pieces_wherever_it_is_cut() -> None:
    chosen = random.Random(45)
    for _ in range(5000):
        text = "".join(chosen.choice(_ALPHABET) for _ in range(chosen.randint(1, 60)))
        cut = list(pieces(text, chosen.randint(1, 12), longest=len(text) + 1))
        assert "".join(cut) == text
        assert sum(map(count_tokens, cut)) == count_tokens(text), cut


def test_a_long_text_without_blank_space_is_cut_where_its_marks_are_and_its_count_stays_exact() -> None:
    """Minified JSON, base64 and hex hold no blank space: each is cut after a letter or digit, before a mark or
    at a change between letters and digits, in pieces of about `PIECE` characters."""
    chosen = random.Random(47)
    records = [{"id": n, "text": f"value{n}", "tags": ["a", "b"]} for n in range(8000)]
    minified = json.dumps(records, separators=(",", ":"))
    encoded = base64.b64encode(chosen.randbytes(200_000)).decode()
    hexadecimal = chosen.randbytes(100_000).hex()
    for text in (minified, encoded, hexadecimal):
        cut = list(pieces(text))
        assert "".join(cut) == text
        assert len(cut) >= len(text) // PIECE
        assert max(map(len, cut)) < PIECE + 64
        assert sum(map(count_tokens, cut)) == count_tokens(text)


def test_a_run_of_letters_longer_than_the_longest_piece_is_cut_there_its_count_within_a_token_a_cut() -> None:
    """A run of letters has no place its count is kept whole; one longer than `LONGEST_PIECE` (only a hostile
    text holds one) is cut there all the same, so that another tenant's count waits for a piece of it, not for
    the encoding's time on all of it, which grows faster than its length."""
    chosen = random.Random(48)
    for letters in ("ab", string.ascii_letters, "\u4e2d\u6587\u00e9"):
        text = "".join(chosen.choice(letters) for _ in range(5 * LONGEST_PIECE + 17))
        cut = list(pieces(text))
        assert "".join(cut) == text
        assert [len(piece) for piece in cut] == [LONGEST_PIECE] * 5 + [17]
        assert abs(sum(map(count_tokens, cut)) - count_tokens(text)) <= len(cut) - 1


def test_a_text_counted_by_its_lines_long_ones_remembered_has_its_own_count() -> None:
    """Lines cut where text follows a line's end, long ones counted once and read back after: every count is the
    text's own, whatever its lines hold (blank space of each kind opening a line, lines long and short)."""
    chosen = random.Random(49)
    counts = LineCounts()
    in_a_line = [part for part in _ALPHABET if "\n" not in part]
    long_lines = ["".join(chosen.choice(in_a_line) for _ in range(REMEMBERED_LINE)) for _ in range(6)]
    long = 0
    for _ in range(300):
        parts = [chosen.choice(long_lines) if chosen.random() < 0.5 else chosen.choice(_ALPHABET) for _ in range(12)]
        text = "".join(part + chosen.choice(["\n", "\n\n", " \n", "\r\n", ""]) for part in parts)
        assert "".join(lines(text)) == text
        assert sum(map(count_tokens, lines(text))) == count_tokens(text)
        assert counts.count("tenant", text) == count_tokens(text), text
        long += sum(len(line) >= REMEMBERED_LINE for line in lines(text))
    assert 0 < counts.lines_counted < long / 2, "long lines were counted, and most read back"


def test_a_block_s_long_entries_are_counted_once_for_a_tenant_in_any_block_and_again_for_another() -> None:
    """A memory block shows each entry on a line of its own: once a tenant's block of long entries is counted, a
    block of some of them, in another order, with one more, counts only the new one; another tenant's block of
    the same entries counts them all (no tenant can time another's). Each count is the block's own."""
    chosen = random.Random(50)
    words = [f"w{n}x" for n in range(3000)]
    entries = [
        RetrievedEntry(str(n), "notes", " ".join(chosen.choice(words) for _ in range(2700))[:16_000], 0.5)
        for n in range(12)
    ]
    counts = LineCounts()

    def counted(namespace: str, shown: list[RetrievedEntry]) -> int:
        block = format_memory_block(shown)
        assert sum(counts.count(namespace, piece) for piece in pieces(block)) == count_tokens(block)
        return counts.lines_counted

    assert counted("a", entries[:10]) == 10
    assert counted("a", [entries[7], entries[2], entries[11], entries[0]]) == 11
    assert counted("b", entries[:10]) == 21


def test_a_block_counted_after_a_blank_line_and_without_has_each_count_exact() -> None:
    """The fold asks for a block's tokens on a blank line of its own and without: each is the count of the text
    asked for, whichever comes first, and whether or not the block starts with blank space."""
    chosen = random.Random(46)

    async def counts() -> None:
        for start in ("<memory>", " <memory>", "\t", "x"):
            block = start + "".join(chosen.choice(_ALPHABET) for _ in range(4000))
            for first, second in ((block, "\n\n" + block), ("\n\n" + block, block)):
                counter = CallTokens("tenant")
                assert await counter(first) == count_tokens(first)
                assert await counter(second) == count_tokens(second)
                assert await counter(first) == count_tokens(first)

    asyncio.run(counts())


def test_another_tenant_s_count_waits_for_a_piece_of_a_long_one_not_for_all_of_them() -> None:
    """One tenant counts twelve texts of a megabyte at once, none counted before (no line of them remembered);
    another's text, counted after them, waits for a piece of one of them (a turn), not for the twelve. asyncio's
    threads would have counted them first come first."""
    chosen = random.Random(51)
    words = [f"view{n}" for n in range(5000)]
    texts = [" ".join(chosen.choices(words, k=100_000)) for _ in range(12)]
    expected = [count_tokens(text) for text in texts]

    async def scenario() -> tuple[float, float]:
        started = time.perf_counter()
        heavy = [asyncio.ensure_future(count_tokens_in_turns("heavy", text)) for text in texts]
        await asyncio.sleep(0.05)
        asked = time.perf_counter()
        other = texts[0][:20_000]
        assert await count_tokens_in_turns("other", other) == count_tokens(other)
        waited = time.perf_counter() - asked
        assert await asyncio.gather(*heavy) == expected
        return waited, time.perf_counter() - started

    waited, all_of_them = asyncio.run(scenario())
    assert waited < all_of_them / 5, f"waited {waited:.3f} s of the heavy counts' {all_of_them:.3f} s"
