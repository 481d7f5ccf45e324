"""`contextfold mcp`, run as a host runs it, over stdio and Streamable HTTP, in front of a real server
that requires keys; every call made with the MCP SDK's own client (and once by a Strands agent)."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import jsonschema
import psutil
import pytest
from contextfold import Client
from contextfold import mcp_server as tools
from contextfold.cli import build_parser
from contextfold_server.api import fields
from mcp.client import Client as McpClient
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS
from strands import Agent
from strands.tools.mcp import MCPClient

from harness.messages import unique
from harness.polling import wait_for
from harness.servers import ROOT, Postgres, ServerProcess, free_port, start_server
from harness.shell import environment
from harness.strands_model import ScriptedModel

from .pages import listening, printed, replacing, running_printed
from .test_tenancy import keys

TOOLS = {"recall", "remember", "update_memory", "forget", "list_stores"}


@dataclass
class Keys:
    acme_admin: str
    acme_agent: str
    # An agent key of acme bound to the user `ana`.
    ana: str
    globex_admin: str


@pytest.fixture(scope="module")
def tenant_keys(postgres: Postgres) -> Keys:
    def create(namespace: str, role: str, *bound: str) -> str:
        return keys(postgres.url, "create", "--namespace", namespace, "--role", role, *bound)["key"]

    return Keys(
        create("acme", "admin"), create("acme", "agent"), create("acme", "agent", "--user-id", "ana"),
        create("globex", "admin"),
    )  # fmt: skip


@pytest.fixture(scope="module")
def server(postgres: Postgres, tenant_keys: Keys, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    log = tmp_path_factory.mktemp("mcp-server") / "server.log"
    process = start_server(log, "--database-url", postgres.url, "--auth", "keys")
    yield process
    assert process.stop() == 0, process.log()
    assert "INTERNAL" not in process.log()


@dataclass
class Entries:
    """acme's notes (ana's and bob's) and globex's, by their ids."""

    store: str
    ana_cat: str
    ana_tea: str
    bob_cat: str
    globex_store: str


@pytest.fixture(scope="module")
def entries(server: ServerProcess, tenant_keys: Keys) -> Entries:
    store = unique("notes")
    with Client(server.address, api_key=tenant_keys.acme_admin, timeout=30) as acme:
        acme.create_store(store, description="what people told us")
        ana_cat, ana_tea, bob_cat = acme.add_memories(
            store,
            [
                {"content": "Ana's cat is called Miso", "user_id": "ana", "metadata": {"topic": "pets"}},
                {"content": "Ana drinks green tea every morning", "user_id": "ana", "metadata": {"topic": "food"}},
                {"content": "Bob's cat is called Pixel", "user_id": "bob", "metadata": {"topic": "pets"}},
            ],
        )
    globex_store = unique("globex-notes")
    with Client(server.address, api_key=tenant_keys.globex_admin, timeout=30) as globex:
        globex.create_store(globex_store)
        globex.add_memories(globex_store, [{"content": "Globex's cat is called Secret", "user_id": "ana"}])
    return Entries(store, ana_cat.id, ana_tea.id, bob_cat.id, globex_store)


def command(address: str, *options: str, cli: tuple[str, ...] = ()) -> list[str]:
    """`contextfold mcp` with `options`, the CLI's own options (`cli`) before it."""
    return [sys.executable, "-m", "contextfold.cli", "--address", address, *cli, "mcp", *options]


def stdio(address: str, key: str, *options: str) -> McpClient:
    """An MCP client of `contextfold mcp` over stdio, started with `key` in its environment."""
    program, *args = command(address, *options)
    environment = {**os.environ, "CONTEXTFOLD_API_KEY": key}
    return McpClient(StdioServerParameters(command=program, args=args, env=environment, cwd=str(ROOT)))


@dataclass
class HttpServer:
    url: str
    process: subprocess.Popen

    def client(self, key: str | None) -> McpClient:
        headers = {"Authorization": f"Bearer {key}"} if key is not None else {}
        return McpClient(streamable_http_client(self.url, http_client=create_mcp_http_client(headers=headers)))


@pytest.fixture(scope="module")
def http(
    server: ServerProcess, entries: Entries, tenant_keys: Keys, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[HttpServer]:
    """`contextfold mcp --transport http` on any free loopback port, with acme's admin key in its
    environment: a request's own key must be the only one its calls carry."""
    log = tmp_path_factory.mktemp("mcp-http") / "mcp.log"
    environment = {**os.environ, "CONTEXTFOLD_API_KEY": tenant_keys.acme_admin}
    with open(log, "w") as output:
        process = subprocess.Popen(
            command(server.address, "--transport", "http", "--port", "0"),
            cwd=ROOT, env=environment, stderr=output, stdout=subprocess.DEVNULL,
        )  # fmt: skip
    found = wait_for(
        lambda: re.search(r"serving on (http://\S+)", log.read_text()), 60, what="contextfold mcp to serve"
    )
    yield HttpServer(found.group(1), process)
    process.terminate()
    assert process.wait(timeout=30) == 0, log.read_text()
    assert "Traceback" not in log.read_text()


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


async def call(session: McpClient, tool: str, **arguments: Any) -> Any:
    """The tool's structured result; fails on a tool error."""
    result = await session.call_tool(tool, arguments)
    assert not result.is_error, result.content
    return result.structured_content


async def refusal(session: McpClient, tool: str, **arguments: Any) -> str:
    """The text of the tool error the call comes back as."""
    result = await session.call_tool(tool, arguments)
    assert result.is_error, result.structured_content
    (content,) = result.content
    return content.text


async def once(client: McpClient, tool: str, **arguments: Any) -> Any:
    """One call's structured result, in a session of its own."""
    async with client as session:
        return await call(session, tool, **arguments)


async def refused_once(client: McpClient, tool: str, **arguments: Any) -> str:
    async with client as session:
        return await refusal(session, tool, **arguments)


async def within(client: McpClient, scenario: Callable[[McpClient], Awaitable[Any]]) -> Any:
    """What `scenario` returns, run in one session of `client`."""
    async with client as session:
        return await scenario(session)


def test_the_tools_are_listed_with_valid_schemas_that_carry_the_apis_limits(server, tenant_keys) -> None:
    async def listed() -> Any:
        async with stdio(server.address, tenant_keys.acme_agent) as session:
            return (await session.list_tools()).tools

    listed_tools = {tool.name: tool for tool in run(listed())}
    assert set(listed_tools) == TOOLS
    for tool in listed_tools.values():
        assert tool.description and len(tool.description) > 40, tool.name
        jsonschema.Draft202012Validator.check_schema(tool.input_schema)
        jsonschema.Draft202012Validator.check_schema(tool.output_schema)
    recall = listed_tools["recall"].input_schema["properties"]
    assert recall["query"]["maxLength"] == fields.MAX_QUERY_CHARS
    assert recall["max_results"]["maximum"] == fields.MAX_SEARCH_RESULTS
    assert recall["stores"]["anyOf"][0]["maxItems"] == fields.MAX_STORES_NAMED
    assert listed_tools["forget"].input_schema["properties"]["ids"]["maxItems"] == fields.MAX_BATCH
    assert listed_tools["remember"].input_schema["properties"]["fact"]["anyOf"][0]["maxLength"] == (
        fields.MAX_CONTENT_CHARS
    )
    assert tools.MAX_MESSAGES == fields.MAX_MESSAGES
    # The schemas' patterns accept what the server accepts, and refuse what it refuses.
    for name in ("notes", "a", "Ana's notes (2026)", "x" * 63):
        assert re.fullmatch(tools.STORE_NAME, name) and fields._STORE_NAME.fullmatch(name), name
    for name in ("", " notes", "notes ", "x" * 64, "tab\there"):
        assert not re.fullmatch(tools.STORE_NAME, name) and not fields._STORE_NAME.fullmatch(name), name
    for memory_id in ("m-1", "x" * 128):
        assert re.fullmatch(tools.MEMORY_ID, memory_id) and fields.is_memory_id(memory_id)
    for memory_id in ("", "a b", "x" * 129):
        assert not re.fullmatch(tools.MEMORY_ID, memory_id) and not fields.is_memory_id(memory_id)


def test_recall_returns_the_entries_with_store_score_id_times_and_etag(server, tenant_keys, entries) -> None:
    found = run(
        once(
            stdio(server.address, tenant_keys.acme_agent, "--user-id", "ana"), "recall", query="What is my cat called?"
        )
    )

    ids = [item["id"] for item in found["entries"]]
    assert ids[0] == entries.ana_cat
    assert entries.bob_cat not in ids
    first = found["entries"][0]
    assert first["store"] == entries.store
    assert first["content"] == "Ana's cat is called Miso"
    assert 0 < first["score"] <= 1
    assert first["create_time"] and first["update_time"] and first["etag"]
    assert first["metadata"] == {"topic": "pets"}

    only_food = run(
        once(
            stdio(server.address, tenant_keys.acme_agent, "--user-id", "ana"),
            "recall",
            query="cat",
            filter={"topic": "food"},
        )
    )
    assert [item["id"] for item in only_food["entries"]] == [entries.ana_tea]


def test_remember_keeps_a_fact_and_a_conversations_user_turns_and_recall_finds_them(
    server, tenant_keys, entries
) -> None:
    conversation = [
        {"role": "user", "text": "I moved to Porto last spring"},
        {"role": "assistant", "text": "Porto is lovely in spring"},
    ]

    async def scenario(session: McpClient) -> None:
        kept = await call(session, "remember", fact="Carla is allergic to peanuts", metadata={"topic": "health"})
        (fact,) = kept["entries"]
        assert (fact["action"], fact["user_id"], fact["store"]) == ("added", "carla", entries.store)
        assert fact["metadata"] == {"topic": "health"}

        (turn,) = (await call(session, "remember", conversation=conversation))["entries"]
        assert (turn["content"], turn["action"]) == ("I moved to Porto last spring", "added")
        again = await call(session, "remember", conversation=conversation)
        assert (again["entries"], again["skipped_turns"]) == ([], 1)

        found = await call(session, "recall", query="Where does Carla live?", max_results=2)
        assert turn["id"] in [item["id"] for item in found["entries"]]
        found = await call(session, "recall", query="What food must Carla avoid?", max_results=1)
        assert [item["id"] for item in found["entries"]] == [fact["id"]]

    run(within(stdio(server.address, tenant_keys.acme_agent, "--store", entries.store, "--user-id", "carla"), scenario))


def test_update_memory_with_a_stale_etag_changes_nothing_and_with_the_current_one_keeps_the_old_version(
    server, tenant_keys, entries
) -> None:
    async def scenario(session: McpClient) -> str:
        (added,) = (await call(session, "remember", fact="Dan plays the cello"))["entries"]
        updated = await call(
            session, "update_memory", id=added["id"], content="Dan plays the viola", etag=added["etag"]
        )
        assert updated["content"] == "Dan plays the viola"
        assert updated["etag"] != added["etag"]
        stale = await refusal(
            session, "update_memory", id=added["id"], content="Dan plays the harp", etag=added["etag"]
        )
        assert stale.startswith("Error executing tool update_memory: ABORTED:"), stale
        return added["id"]

    changed = run(
        within(stdio(server.address, tenant_keys.acme_agent, "--store", entries.store, "--user-id", "dan"), scenario)
    )
    with Client(server.address, api_key=tenant_keys.acme_admin) as acme:
        assert acme.get_memory(changed).content == "Dan plays the viola"
        assert [version.memory.content for version in acme.list_memory_versions(changed)] == ["Dan plays the cello"]


def test_forget_deletes_by_id_and_with_a_stale_etag_keeps_the_entry(server, tenant_keys, entries) -> None:
    async def scenario(session: McpClient) -> None:
        first, second = [(await call(session, "remember", fact=f"Eve fact {n}"))["entries"][0] for n in (1, 2)]
        await call(session, "update_memory", id=first["id"], content="Eve fact 1, corrected")

        stale = await refusal(session, "forget", ids=[first["id"]], etag=first["etag"])
        assert "ABORTED" in stale and first["id"] in stale, stale
        assert await call(session, "forget", ids=[second["id"]], etag=second["etag"]) == {"deleted": 1}
        assert await call(session, "forget", ids=[first["id"]]) == {"deleted": 1}

    run(within(stdio(server.address, tenant_keys.acme_agent, "--store", entries.store, "--user-id", "eve"), scenario))
    with Client(server.address, api_key=tenant_keys.acme_admin) as acme:
        assert not list(acme.list_memories(entries.store, scope={"user_id": "eve"}))


@pytest.mark.parametrize(
    ("tool", "arguments", "named"),
    [
        ("recall", {"query": "cat", "max_results": 500}, "max_results: Input should be less than or equal to 100"),
        ("recall", {"query": ""}, "query: String should have at least 1 character"),
        ("recall", {"query": "cat", "stores": [" padded"]}, "stores.0: String should match pattern"),
        ("recall", {"query": "cat", "stores": ["no-such-store"]}, "NOT_FOUND: store 'no-such-store'"),
        ("recall", {"query": "cat", "filter": {"topic": {"eq": [1, 2]}}}, "filter: a filter compares with"),
        ("recall", {"query": "cat", "filter": {"create_time": {"gte": "last week"}}}, "filter: Invalid isoformat"),
        ("recall", {"query": "cat", "filter": {"all": 5}}, "filter: 'int' object is not iterable"),
        ("recall", {"query": "cat", "filter": {}}, "filter: an empty filter"),
        ("recall", {}, "query: Field required"),
        ("remember", {"fact": "x", "conversation": [{"role": "user", "text": "y"}]}, "fact, conversation: give one"),
        ("remember", {"fact": "x", "store": "no-such-store"}, "NOT_FOUND"),
        ("remember", {"fact": "x"}, "store: name the store"),
        ("remember", {"conversation": [{"role": "system", "text": "y"}]}, "conversation.0.role: Input should be"),
        ("remember", {"fact": "x" * 16_385}, "fact: String should have at most 16384 characters"),
        ("update_memory", {"id": "no-such-entry", "content": "x"}, "NOT_FOUND"),
        ("update_memory", {"id": "a b", "content": "x"}, "id: String should match pattern"),
        ("update_memory", {"id": "m1"}, "content, metadata: give at least one"),
        ("update_memory", {"id": "m1", "metadata": {"deep": json.loads("[" * 20 + "]" * 20)}}, "metadata"),
        ("forget", {"ids": []}, "ids: List should have at least 1 item"),
        ("forget", {"ids": ["a", "b"], "etag": "e"}, "INVALID_ARGUMENT: etag: names one entry's version"),
        ("forget", {"ids": ["no-such-entry"]}, "NOT_FOUND"),
    ],
)
def test_a_bad_argument_comes_back_as_a_tool_error_naming_it_and_the_reason(
    server, tenant_keys, entries, tool: str, arguments: dict, named: str
) -> None:
    text = run(refused_once(stdio(server.address, tenant_keys.acme_admin, "--user-id", "ana"), tool, **arguments))

    assert text.startswith(f"Error executing tool {tool}: "), text
    assert named in text, text
    for leak in ("Traceback", "INTERNAL", "input_value", "errors.pydantic.dev"):
        assert leak not in text, text


def test_list_stores_and_the_stores_resources_show_what_the_key_can_see(server, tenant_keys, entries) -> None:
    async def look(client: McpClient) -> tuple[Any, Any, Any, Any]:
        async with client as session:
            listed = (await session.call_tool("list_stores", {})).structured_content
            resources = [resource.uri for resource in (await session.list_resources()).resources]
            templates = [
                template.uri_template for template in (await session.list_resource_templates()).resource_templates
            ]
            index = json.loads((await session.read_resource("contextfold://stores")).contents[0].text)
            one = json.loads((await session.read_resource(f"contextfold://stores/{entries.store}")).contents[0].text)
            return listed, (resources, templates), index, one

    listed, (resources, templates), index, one = run(
        look(stdio(server.address, tenant_keys.acme_agent, "--user-id", "ana"))
    )
    (store,) = [item for item in listed["stores"] if item["name"] == entries.store]
    assert (store["description"], store["dimension"]) == ("what people told us", 384)
    assert entries.globex_store not in [item["name"] for item in listed["stores"]]
    assert index == {"stores": listed["stores"]}
    assert (resources, templates) == (["contextfold://stores"], ["contextfold://stores/{name}"])
    assert one["store"]["name"] == entries.store
    assert {entries.ana_cat, entries.ana_tea} <= {item["id"] for item in one["entries"]}
    assert entries.bob_cat not in {item["id"] for item in one["entries"]}


def test_the_prompt_folds_the_memory_block_inject_gives_for_the_question(server, tenant_keys, entries) -> None:
    async def prompt() -> Any:
        async with stdio(
            server.address, tenant_keys.acme_agent, "--store", entries.store, "--user-id", "ana"
        ) as session:
            (listed,) = (await session.list_prompts()).prompts
            return listed, await session.get_prompt("with_memory", {"question": "What is my cat called?"})

    listed, result = run(prompt())
    assert listed.name == "with_memory"
    (message,) = result.messages
    assert message.role == "user"
    assert message.content.text.startswith("What is my cat called?\n\n<memory>\n")
    assert f'<entry source="{entries.store}">Ana\'s cat is called Miso</entry>' in message.content.text
    assert "Pixel" not in message.content.text


def test_the_prompt_refuses_an_empty_question_naming_it(server, tenant_keys) -> None:
    async def ask() -> MCPError:
        async with stdio(server.address, tenant_keys.acme_agent) as session:
            with pytest.raises(MCPError) as refused:
                await session.get_prompt("with_memory", {"question": "  "})
            return refused.value

    refused = run(ask())
    assert refused.code == INVALID_PARAMS
    assert refused.message.startswith("question: must be 1 to 16384 characters")


def test_with_contextfold_unreachable_every_call_is_a_tool_error_that_says_so() -> None:
    async def scenario(session: McpClient) -> list[str]:
        return [
            await refusal(session, "recall", query="cat"),
            await refusal(session, "list_stores"),
            await refusal(session, "forget", ids=["m1"]),
        ]

    for text in run(within(stdio("127.0.0.1:1", "cfk_00000000_any"), scenario)):
        assert "UNAVAILABLE" in text and "Traceback" not in text, text


def test_over_http_a_recall_takes_about_what_it_takes_over_stdio(server, http, tenant_keys, entries) -> None:
    """An answer over HTTP leaves at once: the listening socket had no TCP_NODELAY (asyncio sets it only on
    sockets made with IPPROTO_TCP), so each answer's last segment waited for the client's delayed ACK, and
    a recall took 40 ms more over HTTP than over stdio. A loose bound here (bench/mcp.py measures it)."""

    async def p50(client: McpClient) -> float:
        async with client as session:
            await call(session, "recall", query="cat")
            samples = []
            for _ in range(15):
                started = time.perf_counter()
                await call(session, "recall", query="cat")
                samples.append(time.perf_counter() - started)
        return statistics.median(samples)

    over_stdio = run(p50(stdio(server.address, tenant_keys.acme_admin)))
    over_http = run(p50(http.client(tenant_keys.acme_admin)))
    assert over_http < over_stdio + 0.025, f"HTTP {over_http * 1000:.1f} ms, stdio {over_stdio * 1000:.1f} ms"


def test_over_http_each_request_acts_with_its_own_key_so_two_keys_see_two_tenants(http, tenant_keys, entries) -> None:
    acme = run(once(http.client(tenant_keys.acme_admin), "list_stores"))
    globex = run(once(http.client(tenant_keys.globex_admin), "list_stores"))

    assert entries.store in [store["name"] for store in acme["stores"]]
    assert [store["name"] for store in globex["stores"]] == [entries.globex_store]
    found = run(once(http.client(tenant_keys.globex_admin), "recall", query="cat", max_results=10))
    assert [item["content"] for item in found["entries"]] == ["Globex's cat is called Secret"]


def test_over_http_concurrent_requests_of_two_tenants_each_act_with_their_own_key(http, tenant_keys, entries) -> None:
    """Forty sessions at once, two tenants interleaved on one process: each sees its own tenant only (the
    key rides with its request, never with whichever request the process served before or beside it)."""

    async def session(key: str) -> list[str]:
        async with http.client(key) as client:
            found = await call(client, "recall", query="Whose cat is this?", max_results=100)
            listed = await call(client, "list_stores")
        return [item["store"] for item in found["entries"]] + [store["name"] for store in listed["stores"]]

    async def crowd() -> list[list[str]]:
        keys = [tenant_keys.acme_admin, tenant_keys.globex_admin] * 20
        return await asyncio.gather(*(session(key) for key in keys))

    for n, seen in enumerate(run(crowd())):
        if n % 2:
            assert set(seen) == {entries.globex_store}, seen
        else:
            assert entries.store in seen and entries.globex_store not in seen, seen


def test_over_http_a_request_without_a_key_is_refused_though_the_process_has_one(http, tenant_keys) -> None:
    for key in (None, "cfk_00000000_not-a-key"):
        text = run(refused_once(http.client(key), "list_stores"))
        assert "UNAUTHENTICATED" in text, text


def test_over_http_a_key_that_cannot_be_one_is_a_tool_error_saying_why(http) -> None:
    text = run(refused_once(http.client("cfk_..."), "list_stores"))
    assert "the API key in the request's Authorization header looks like a placeholder" in text, text
    assert "INTERNAL" not in text and "Traceback" not in text


def test_over_stdio_a_key_that_cannot_be_one_stops_the_start_naming_where_it_came_from(server) -> None:
    environment = {**os.environ, "CONTEXTFOLD_API_KEY": "cfk_…"}
    ended = subprocess.run(
        command(server.address), env=environment, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL
    )
    assert ended.returncode == 2
    assert ended.stderr.startswith("error: the API key from CONTEXTFOLD_API_KEY holds '…' (U+2026) at position 4"), (
        ended.stderr
    )
    assert "Traceback" not in ended.stderr


def test_a_scope_bound_key_through_mcp_reaches_only_its_users_entries(server, http, tenant_keys, entries) -> None:
    for client in (lambda: stdio(server.address, tenant_keys.ana), lambda: http.client(tenant_keys.ana)):
        found = run(once(client(), "recall", query="Whose cat is called Pixel?", max_results=100))
        assert {item["id"] for item in found["entries"]} == {entries.ana_cat, entries.ana_tea}
        assert "NOT_FOUND" in run(refused_once(client(), "update_memory", id=entries.bob_cat, content="taken"))
        assert "NOT_FOUND" in run(refused_once(client(), "forget", ids=[entries.bob_cat]))

        async def resource(session_client: McpClient) -> Any:
            async with session_client as session:
                return json.loads(
                    (await session.read_resource(f"contextfold://stores/{entries.store}")).contents[0].text
                )

        assert entries.bob_cat not in {item["id"] for item in run(resource(client()))["entries"]}
    # Asking for bob's entries in the server's own scope option is refused, not widened.
    refused = run(refused_once(stdio(server.address, tenant_keys.ana, "--user-id", "bob"), "recall", query="cat"))
    assert "PERMISSION_DENIED" in refused and "user_id" in refused, refused
    with Client(server.address, api_key=tenant_keys.acme_admin) as acme:
        assert acme.get_memory(entries.bob_cat).content == "Bob's cat is called Pixel"


def test_the_http_transport_listens_on_loopback_unless_told_otherwise(http) -> None:
    listening = {
        connection.laddr.ip
        for connection in psutil.Process(http.process.pid).net_connections("inet")
        if connection.status == psutil.CONN_LISTEN
    }
    assert listening == {"127.0.0.1"}


def test_over_http_with_an_api_key_option_it_refuses_to_start(server) -> None:
    done = subprocess.run(
        command(server.address, "--transport", "http", cli=("--api-key", "k")), cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 2
    assert "each caller sends its own key" in done.stderr


def test_a_strands_agent_with_its_mcp_client_calls_recall_and_reads_the_entries(server, tenant_keys, entries) -> None:
    program, *args = command(server.address, "--user-id", "ana")
    environment = {**os.environ, "CONTEXTFOLD_API_KEY": tenant_keys.acme_agent}

    from mcp import stdio_client

    mcp = MCPClient(lambda: stdio_client(StdioServerParameters(command=program, args=args, env=environment)))
    model = ScriptedModel([{"tool": "recall", "input": {"query": "What is my cat called?"}}, "Your cat is Miso."])
    with mcp:
        agent = Agent(model=model, tools=mcp.list_tools_sync(), callback_handler=None)
        result = agent("What is my cat called?")

    assert str(result).strip() == "Your cat is Miso."
    assert "recall" in {spec["name"] for spec in agent.tool_registry.get_all_tool_specs()}
    tool_results = [
        block["toolResult"] for message in model.inputs[1] for block in message["content"] if "toolResult" in block
    ]
    (outcome,) = tool_results
    assert outcome["status"] == "success"
    shown = json.dumps(outcome["content"])
    assert "Ana's cat is called Miso" in shown and entries.ana_cat in shown
    assert "Pixel" not in shown


def test_mcp_help_lists_its_options() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "contextfold.cli", "mcp", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    for option in ("--transport", "--host", "--port", "--store", "--user-id"):
        assert option in done.stdout


DOCS = (ROOT / "docs" / "mcp.md").read_text()


def test_the_docs_host_configuration_starts_contextfold_mcp_with_options_it_has() -> None:
    (config,) = [json.loads(block) for block in re.findall(r"```json\n(.*?)```", DOCS, flags=re.S)]
    (memory,) = config["mcpServers"].values()
    assert memory["command"] == "contextfold" and "CONTEXTFOLD_API_KEY" in memory["env"]
    common, rest = build_parser().parse_known_args(memory["args"])
    assert common.command == "mcp"
    parser = argparse.ArgumentParser()
    tools.add_options(parser)
    assert parser.parse_args(rest).store == ["notes"]


def test_the_docs_error_lines_are_what_the_tools_answer(server, tenant_keys, entries) -> None:
    (printed,) = re.findall(r"```text\n(.*?)```", DOCS, flags=re.S)
    memory_id = unique("m")
    with Client(server.address, api_key=tenant_keys.acme_admin) as acme:
        (added,) = acme.add_memories(entries.store, [{"id": memory_id, "content": "Fay likes figs"}])
        acme.update_memory(memory_id, content="Fay likes dates")

    async def scenario(session: McpClient) -> list[str]:
        return [
            await refusal(session, "recall", query="cat", max_results=500),
            await refusal(session, "recall", query="cat", stores=["no-such-store"]),
            await refusal(session, "update_memory", id=memory_id, content="Fay likes plums", etag=added.etag),
            await refusal(session, "remember", fact="x", conversation=[{"role": "user", "text": "y"}]),
        ]

    answered = run(within(stdio(server.address, tenant_keys.acme_agent), scenario))
    assert printed.replace("'m-1'", repr(memory_id)).splitlines() == answered


FUZZ_SEED = int(os.environ.get("CONTEXTFOLD_MCP_FUZZ_SEED", "20261201"))
_FUZZ_VALUES: list[Any] = [
    "", " ", "a", "notes", "x" * 64, "y" * 16_385, "nul\x00byte", "\x7f", "\u202e\u200b", "\U0010ffff",
    "line\nbreak", "{{ 7 * 7 }}", "2026-13-45", "cfk_00000000_x", 0, 1, -1, 101, 2**31, -(2**63), 1e308, -0.5,
    True, False, None, [], [None], ["a", 1], [{"role": "user", "text": ""}], [{"role": "system"}], {}, {"all": 5},
    {"any": []}, {"not": None}, {"create_time": {"gte": "yesterday"}}, {"a": {"in": [[1]]}}, {"deep": [[[[[[]]]]]]},
]  # fmt: skip


# Arguments each tool takes, for the fuzzer to change one at a time: past the schema, into the tool's body.
VALID_ARGUMENTS: dict[str, dict[str, Any]] = {
    "recall": {"query": "What is my cat called?"},
    "remember": {"fact": "Fuzz likes figs"},
    "update_memory": {"id": "no-such-entry", "content": "x"},
    "forget": {"ids": ["no-such-entry"]},
    "list_stores": {},
}


def fuzzed_arguments(rng: random.Random, tool: str, schema: dict) -> dict[str, Any]:
    """Arguments for a tool: half its valid ones with one changed, half each property left out or set at
    random; values from the places where input goes wrong (any type, any size), now and then a name the
    schema does not have."""
    properties = list(schema.get("properties", {}))
    if rng.random() < 0.5 and properties:
        arguments = dict(VALID_ARGUMENTS[tool])
        arguments[rng.choice(properties)] = rng.choice(_FUZZ_VALUES)
        return arguments
    arguments = {}
    for name in properties:
        if rng.random() < 0.6:
            value = rng.choice(_FUZZ_VALUES)
            arguments[name] = [value] * rng.choice([1, 2, 101]) if rng.random() < 0.1 else value
    if rng.random() < 0.1:
        arguments[rng.choice(["extra", "__proto__", "ids[0]"])] = rng.choice(_FUZZ_VALUES)
    return arguments


def test_fuzzed_arguments_get_a_result_or_a_tool_error_that_says_why_never_a_crash(
    server, tenant_keys, entries
) -> None:
    """Every tool, 400 calls each with seeded arguments of any type and size: each call answers, or comes
    back as a tool error with a reason; none is the SDK's bare message for a tool that raised."""
    rng = random.Random(FUZZ_SEED)

    async def scenario(session: McpClient) -> list[tuple[str, dict, str]]:
        crashed = []
        for tool in (await session.list_tools()).tools:
            for _ in range(400):
                arguments = fuzzed_arguments(rng, tool.name, tool.input_schema)
                result = await session.call_tool(tool.name, arguments)
                text = result.content[0].text if result.content else ""
                if result.is_error and not text.startswith(f"Error executing tool {tool.name}: "):
                    crashed.append((tool.name, arguments, text))
        return crashed

    client = stdio(server.address, tenant_keys.acme_agent, "--store", entries.store, "--user-id", "fuzz")
    crashed = run(within(client, scenario))
    assert not crashed, f"seed {FUZZ_SEED}: {crashed[:3]}"


@pytest.fixture(scope="module")
def notes(server: ServerProcess, tenant_keys: Keys) -> str:
    """The store the docs' commands name (`--store notes`), with an entry of ana's and one of bob's."""
    with Client(server.address, api_key=tenant_keys.acme_admin, timeout=30) as acme:
        acme.create_store("notes")
        (ana,) = acme.add_memories("notes", [{"content": "Ana parks on level 3", "user_id": "ana"}])
        acme.add_memories("notes", [{"content": "Bob parks on level 5", "user_id": "bob"}])
    return ana.id


def test_the_pages_stdio_command_runs_as_printed_confined_to_its_user(server, tenant_keys, notes) -> None:
    """docs/mcp.md's stdio line, its key and address the test's: the host starts it and recalls ana's note only."""
    line = replacing(
        printed("docs/mcp.md", "memory.internal:50051 mcp --store notes --user-id ana"),
        {"cfk_…": tenant_keys.acme_agent, "memory.internal:50051": server.address},
    )
    host = McpClient(StdioServerParameters(command="bash", args=["-euc", line], env=environment(), cwd=str(ROOT)))
    found = run(once(host, "recall", query="Where do I park?"))
    assert [item["id"] for item in found["entries"]] == [notes]


def test_the_pages_http_command_runs_as_printed_each_request_with_its_own_key(server, tenant_keys, notes) -> None:
    """docs/mcp.md's Streamable HTTP line, on a free loopback port: a request with acme's key recalls from
    `notes`; one with globex's key is refused there, as contextfold refuses it."""
    port = free_port()
    line = replacing(
        printed("docs/mcp.md", "memory.internal:50051 mcp --transport http --port 8765"),
        {"memory.internal:50051": server.address, "--port 8765": f"--port {port}"},
    )
    with running_printed(line, ROOT, listening(port)) as process:
        served = HttpServer(f"http://127.0.0.1:{port}/mcp", process)
        found = run(once(served.client(tenant_keys.acme_agent), "recall", query="Where does Bob park?"))
        assert found["entries"][0]["content"] == "Bob parks on level 5"
        refused = run(refused_once(served.client(tenant_keys.globex_admin), "recall", query="Where does Bob park?"))
        assert refused.endswith("NOT_FOUND: store 'notes' does not exist"), refused
