"""Injection fails open when what it depends on fails: the database, the embedding endpoint.

Each test runs its own server on a Postgres it owns, so it can stop that Postgres mid-run.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from contextfold import Client, Unavailable
from contextfold.v1 import injection_pb2

from harness.messages import user
from harness.servers import Postgres, ServerProcess, start_server
from harness.stand_ins.embeddings_api import DIMENSION, FakeEmbeddingsAPI


@pytest.fixture
def embeddings_api() -> Iterator[FakeEmbeddingsAPI]:
    api = FakeEmbeddingsAPI()
    yield api
    api.close()


@pytest.fixture
def remote_embedding_server(
    tmp_path, fresh_postgres: Postgres, embeddings_api: FakeEmbeddingsAPI
) -> Iterator[ServerProcess]:
    process = start_server(
        tmp_path / "server.log",
        "--database-url",
        fresh_postgres.url,
        "--embedder",
        "openai",
        "--openai-base-url",
        embeddings_api.base_url,
        "--openai-model",
        "fake-embed-1",
        "--sandbox-workers",
        "1",
        env={"CONTEXTFOLD_OPENAI_API_KEY": "sk-test-key", "CONTEXTFOLD_SANDBOX_TIME_LIMIT_MS": "40"},
    )
    yield process
    assert process.stop() == 0, process.log()


def test_the_openai_compatible_endpoint_embeds_adds_and_queries(
    remote_embedding_server: ServerProcess, embeddings_api: FakeEmbeddingsAPI
) -> None:
    with Client(remote_embedding_server.address) as cf:
        store = cf.create_store("notes")
        assert store.dimension == DIMENSION
        cf.add_memories("notes", ["the garage door code is blue", "lunch is at noon"])
        result = cf.inject([user("what is the garage door code")], max_entries=1)

    assert result.report.injected
    assert "garage door code is blue" in result.messages[0]["content"][-1]["injected"]["text"]
    assert {request["auth"] for request in embeddings_api.requests} == {"Bearer sk-test-key"}
    assert {request["body"]["model"] for request in embeddings_api.requests} == {"fake-embed-1"}
    assert ["the garage door code is blue", "lunch is at noon"] in [r["body"]["input"] for r in embeddings_api.requests]


def test_injection_fails_open_when_the_embedding_endpoint_fails(
    remote_embedding_server: ServerProcess, embeddings_api: FakeEmbeddingsAPI
) -> None:
    conversation = [user("what is the garage door code")]
    with Client(remote_embedding_server.address) as cf:
        cf.create_store("notes")
        cf.add_memories("notes", ["the garage door code is blue"])
        embeddings_api.failing = True
        result = cf.inject(conversation)
        with pytest.raises(Unavailable):
            cf.add_memories("notes", ["not stored"])
        embeddings_api.failing = False
        assert [m.content for m in cf.list_memories("notes")] == ["the garage door code is blue"]

    assert result.messages == conversation
    assert result.report.skip_reason == injection_pb2.SKIP_REASON_FAILED
    assert "embedding endpoint failed" in result.report.detail


def test_injection_fails_open_when_the_database_stops_mid_run(tmp_path, fresh_postgres: Postgres) -> None:
    process = start_server(tmp_path / "server.log", "--database-url", fresh_postgres.url)
    conversation = [user("What is my favourite colour?")]
    try:
        with Client(process.address, timeout=30) as cf:
            cf.create_store("prefs")
            cf.add_memories("prefs", ["The user's favourite colour is green"])
            assert cf.inject(conversation).report.injected

            fresh_postgres.kill()
            result = cf.inject(conversation)
            assert result.messages == conversation
            assert result.report.skip_reason == injection_pb2.SKIP_REASON_FAILED
            assert "database unavailable" in result.report.detail

            with pytest.raises(Unavailable) as raised:
                cf.add_memories("prefs", ["anything"])
            assert "Traceback" not in raised.value.message
    finally:
        assert process.stop() == 0, process.log()
    assert "Traceback" not in process.log()


def test_the_sandbox_time_limit_is_the_operators_to_set(remote_embedding_server: ServerProcess) -> None:
    slow = "app_state.s.split('').map(c, app_state.s + app_state.s).join('')"
    conversation = [user("anything")]
    with Client(remote_embedding_server.address) as cf:
        cf.create_store("notes")
        cf.add_memories("notes", ["the garage door code is blue"])
        for _ in range(5):
            result = cf.inject(conversation, query_expression=slow, app_state={"s": "x" * 5000})
            # Given less than half its CPU in its time (other processes on a busy machine), the sandbox gives no
            # verdict on the expression (`SandboxFailed`): asked again, it gets its time.
            if not result.report.detail.endswith("the machine is busy"):
                break
        after = cf.inject([user("what is the garage door code")], query_expression="latest_user_text")

    assert result.messages == conversation
    assert result.report.skip_reason == injection_pb2.SKIP_REASON_TIMEOUT
    assert result.report.detail == "the query expression: ran past its time limit of 40 ms"
    assert after.report.injected, "the one worker was replaced and serves the next call"
