"""The heaviest requests of each kind the service accepts (or refuses), and a health probe to run beside
them: shared by the tests (tests/test_neighbours.py) and the benchmark (bench/neighbours.py)."""

from __future__ import annotations

import contextlib
import json
import random
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable, Iterator

import grpc
import pytest
from contextfold import AlreadyExists, Client, InvalidArgument
from contextfold.v1 import conversation_pb2, injection_pb2, injection_pb2_grpc

from .messages import unique, user
from .servers import ROOT, ServerProcess, provider_fixtures


@contextlib.contextmanager
def registered_large_providers(cf: Client) -> Iterator[dict]:
    """Three providers that each answer 900 KB of words (within the 1 MiB limit): the Inject options
    that ask them."""
    with provider_fixtures() as ports:
        names = [unique("large") for _ in range(3)]
        for name in names:
            cf.register_provider(name, f"127.0.0.1:{ports['scripted']}", timeout=20)
        yield {"providers": names, "app_state": {"texts": dict.fromkeys(names, "@large")}}
        for name in names:
            cf.delete_provider(name)


@contextlib.contextmanager
def probing(server: ServerProcess, *inject: str) -> Iterator[list[float]]:
    """Health latencies measured from another connection for as long as the block runs; given a key and a store
    (`inject`), that tenant's `Inject` latencies instead (`harness.inject_probe`)."""
    probe = subprocess.Popen(
        [sys.executable, "-m", "harness.inject_probe" if inject else "harness.health_probe", server.address, *inject],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    latencies: list[float] = []
    try:
        assert probe.stdout is not None and probe.stdout.readline() == "probing\n"
        yield latencies
    finally:
        out, _ = probe.communicate("", timeout=60)
    latencies.extend(json.loads(out))


def a_conversation_at_the_limits() -> list[dict]:
    """2,000 messages, 20,000 blocks, 3.5 MB of text: within every limit."""
    words = "the user asked about the deployment of the service again " * 3
    return [
        {"role": "user" if n % 2 == 0 else "assistant", "content": [{"text": words} for _ in range(10)]}
        for n in range(2000)
    ]


def refused_unparsed(server: ServerProcess) -> None:
    """4 MB of one-letter blocks, far over the block limit: refused before it is parsed."""
    request = injection_pb2.InjectRequest(
        messages=[
            conversation_pb2.Message(role=conversation_pb2.ROLE_USER, content=[{"text": "x"}] * 400)
            for _ in range(2000)
        ]
    )
    with grpc.insecure_channel(server.address) as channel, pytest.raises(grpc.RpcError) as raised:
        injection_pb2_grpc.InjectionServiceStub(channel).Inject(request, timeout=60)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert raised.value.details() == "messages: hold 800000 content blocks; the limit is 20000"


# Stores the heaviest requests ask: 300 entries each, in sessions of ten, with vectors of their own (no model's time
# spent filling them). The long ones of 16,000 characters (the limit is 16,384), each of its own 1,500 or so words.
LONG_STORE = "heavy-long-entries"
SHORT_STORE = "heavy-short-entries"
ENTRIES = 300


def long_entries(cf: Client) -> str:
    """`LONG_STORE`, filled the first time it is asked for (a second call finds it there): its name."""
    chosen = random.Random(LONG_STORE)
    words = [f"w{n}x" for n in range(5000)]
    texts = (" ".join(chosen.choice(words) for _ in range(2700))[:16_000] for _ in range(ENTRIES))
    return _filled(cf, LONG_STORE, "entries as long as an entry may be", texts)


def short_entries(cf: Client) -> str:
    """`SHORT_STORE` (entries of a line each), filled the first time it is asked for: its name."""
    texts = (f"The user likes item {n} very much." for n in range(ENTRIES))
    return _filled(cf, SHORT_STORE, "entries of a line each", texts)


def _filled(cf: Client, store: str, description: str, texts: Iterable[str]) -> str:
    try:
        cf.create_store(store, description=description, dimension=384)
    except AlreadyExists:
        return store
    chosen = random.Random(store)
    batch = []
    for n, text in enumerate(texts):
        vector = [chosen.gauss(0.0, 1.0) for _ in range(384)]
        batch.append({"content": text, "vector": vector, "user_id": "heavy", "session_id": f"s{n // 10}"})
        if len(batch) == 20:
            cf.add_memories(store, batch)
            batch = []
    if batch:
        cf.add_memories(store, batch)
    return store


def a_hundred_long_entries(cf: Client) -> object:
    """The most entries an Inject may ask for, among long ones, none left to the gate: its ranking reads
    500 candidates and compares the hundred kept with each other."""
    store = long_entries(cf)
    question = user("What did they say about w17x and w4242x?")
    return cf.inject([question], stores=[store], scope={"user_id": "heavy"}, max_entries=100, min_score=-1.0)


def a_conversation_showing_20_000_blocks(cf: Client) -> object:
    """A conversation of 20,000 blocks memory injected earlier, sent back by their text alone (2.9 MB: within every
    limit), each entry found looked for in each of them: a hundred asked for, and 50 more for those it shows."""
    shown = {
        "injected": {
            "source": "memory",
            "text": "<memory>\n<entry>" + "an earlier note, " * 6 + "</entry>\n</memory>",
            "entryIds": [],
        }
    }
    messages = [{"role": "user" if n % 2 == 0 else "assistant", "content": [shown] * 10} for n in range(1999)]
    question = user("What does the user like?")
    return cf.inject([*messages, question], stores=[short_entries(cf)], max_entries=100, min_score=-1.0)


def at_once(server: ServerProcess, call: Callable[[Client], object], callers: int = 4) -> None:
    """`call` made by `callers` clients at once, each on a connection of its own."""
    failed: list[BaseException] = []

    def one() -> None:
        try:
            with Client(server.address, timeout=60) as cf:
                call(cf)
        except BaseException as error:  # noqa: BLE001 - told to the caller below
            failed.append(error)

    threads = [threading.Thread(target=one) for _ in range(callers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failed:
        raise failed[0]


def a_long_question_naming_dates(cf: Client) -> object:
    """A question as long as a message's text may make it (16,000 characters), naming days and dates all the
    way (the weighing reads each), asked of the long entries."""
    text = "What happened yesterday, last Friday, 3 weeks ago, on 5 May 2023 or 2023-05-09, in June? Where was Bo? "
    return cf.inject([user((text * 200)[:16_000])], stores=[long_entries(cf)], scope={"user_id": "heavy"})


def refused(call: Callable[[], object]) -> None:
    with pytest.raises(InvalidArgument):
        call()


HEAVY: dict[str, Callable[[Client, ServerProcess, dict], object]] = {
    "a budget enforced over three 900 KB provider answers, coalesced": lambda cf, server, large: cf.inject(
        [user("go")], max_tokens=50, coalesce=True, **large
    ),
    "three 900 KB provider answers folded whole": lambda cf, server, large: cf.inject([user("go")], **large),
    "a conversation at the limits, with a query expression": lambda cf, server, large: cf.inject(
        a_conversation_at_the_limits(), query_expression="latest_user_text"
    ),
    "a conversation over the block limit": lambda cf, server, large: refused(
        lambda: cf.inject([{"role": "user", "content": [{"text": "x"} for _ in range(30_000)]}])
    ),
    "twenty thousand provider names": lambda cf, server, large: refused(
        lambda: cf.inject([user("go")], providers=[f"p{n}" for n in range(20_000)])
    ),
    "a template that builds a huge constant as it compiles": lambda cf, server, large: refused(
        lambda: cf.inject([user("go")], format_template="{{ 'ab'|center(300000000) }}")
    ),
    "an expression that runs past its time": lambda cf, server, large: cf.inject(
        [user("go")],
        query_expression="app_state.s.split('').map(c, app_state.s + app_state.s).join('')",
        app_state={"s": "x" * 20_000},
    ),
    "4 MB of one-letter blocks, refused before it is parsed": lambda cf, server, large: refused_unparsed(server),
    "a hundred entries asked of long ones, none gated": lambda cf, server, large: a_hundred_long_entries(cf),
    "a question of 16,000 characters naming dates": lambda cf, server, large: a_long_question_naming_dates(cf),
    "a conversation showing 20,000 blocks by their text": lambda cf, server, large: (
        a_conversation_showing_20_000_blocks(cf)
    ),
    "four callers at once, each asking a hundred long entries": lambda cf, server, large: at_once(
        server, a_hundred_long_entries
    ),
}
# Each kind of request is made again and again for this long, so the probe sees it through.
SECONDS_EACH = 1.0
