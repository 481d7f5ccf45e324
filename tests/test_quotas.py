"""Quotas per tenant, as the operator sets them (`contextfold tenants set-quota`): over one, a write is
RESOURCE_EXHAUSTED with `QuotaFailure` naming the limit, nothing of it is stored, and another tenant
is untouched; what a tenant holds is counted as it writes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from contextfold import Client, ResourceExhausted
from contextfold.v1 import memory_pb2

from harness.polling import wait_for
from harness.servers import Postgres, ServerProcess, start_server

from .test_tenancy import keys, operator, works


def tenants(database_url: str, *args: str) -> dict:
    return operator("tenants", database_url, *args)


# Each test's tenant and its quota, set before the server starts (so no test waits for one to apply).
QUOTAS = {
    "few-stores": ("--stores", "2", "--providers", "1"),
    "few-entries": ("--entries", "5"),
    "short-history": ("--versions-per-entry", "2"),
    "slow-caller": ("--requests-per-second", "2"),
}


@pytest.fixture(scope="module")
def quoted(postgres: Postgres, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    for namespace, limits in QUOTAS.items():
        tenants(postgres.url, "set-quota", namespace, *limits)
    process = start_server(
        tmp_path_factory.mktemp("quotas") / "server.log", "--database-url", postgres.url, "--auth", "keys"
    )
    yield process
    assert process.stop() == 0, process.log()


@pytest.fixture(scope="module")
def connect(quoted: ServerProcess, postgres: Postgres) -> Iterator:
    clients: list[Client] = []

    def client(namespace: str) -> Client:
        key = keys(postgres.url, "create", "--namespace", namespace, "--role", "admin")["key"]
        clients.append(Client(quoted.address, api_key=key, timeout=30))
        wait_for(lambda: works(clients[-1]), 10, what="the key to work")
        return clients[-1]

    yield client
    for made in clients:
        made.close()


def _refused(call, limit: str) -> ResourceExhausted:
    with pytest.raises(ResourceExhausted) as refused:
        call()
    assert refused.value.reason == f"QUOTA_{limit.upper()}", refused.value
    return refused.value


def test_a_tenant_over_its_quota_of_stores_or_providers_is_refused_and_the_other_is_not(
    postgres: Postgres, connect
) -> None:
    limited, other = connect("few-stores"), connect("roomy")
    shown = tenants(postgres.url, "show", "few-stores")
    assert shown["quota"]["stores"] == 2 and shown["quota"]["entries"] == 10_000_000, "the defaults for the rest"
    limited.create_store("one", dimension=2)
    limited.create_store("two", dimension=2)
    refused = _refused(lambda: limited.create_store("three", dimension=2), "stores")
    assert "2" in refused.message and [s.name for s in limited.list_stores()] == ["one", "two"]
    limited.register_provider("first", "127.0.0.1:9")
    _refused(lambda: limited.register_provider("second", "127.0.0.1:9"), "providers")
    for n in range(3):
        other.create_store(f"store-{n}", dimension=2)
    other.register_provider("first", "127.0.0.1:9")
    other.register_provider("second", "127.0.0.1:9")


def test_entries_past_the_quota_are_refused_whole_and_counted_as_written(postgres: Postgres, connect) -> None:
    limited, other = connect("few-entries"), connect("roomy-entries")
    limited.create_store("facts", dimension=2)
    limited.add_memories("facts", [{"content": f"fact {n}", "vector": [1.0, 0.0]} for n in range(4)])
    # A batch that would pass the quota is refused whole: nothing of it is stored.
    _refused(
        lambda: limited.add_memories("facts", [{"content": f"more {n}", "vector": [1.0, 0.0]} for n in range(3)]),
        "entries",
    )
    assert len(list(limited.list_memories("facts"))) == 4
    (fifth,) = limited.add_memories("facts", [{"content": "the fifth", "vector": [1.0, 0.0]}])
    _refused(lambda: limited.add_memories("facts", [{"content": "a sixth", "vector": [1.0, 0.0]}]), "entries")
    _refused(
        lambda: limited.update_memory("free-id", content="x", vector=[1.0, 0.0], store="facts", allow_missing=True),
        "entries",
    )
    imported = memory_pb2.ImportMemoriesRequest(
        memories=[memory_pb2.Memory(id="imported", store="facts", content="imported", vector=[1.0, 0.0])]
    )
    _refused(lambda: limited.import_memories([imported]), "entries")
    usage = tenants(postgres.url, "show", "few-entries")["usage"]
    assert usage["entries"] == 5 and usage["stored_bytes"] > 0
    # A deletion makes room again; the other tenant never hears of the quota.
    limited.delete_memories([fifth.id])
    limited.add_memories("facts", [{"content": "another fifth", "vector": [1.0, 0.0]}])
    other.create_store("facts", dimension=2)
    other.add_memories("facts", [{"content": f"fact {n}", "vector": [1.0, 0.0]} for n in range(20)])
    assert tenants(postgres.url, "show", "roomy-entries")["usage"]["entries"] == 20


def test_an_entry_keeps_as_many_versions_as_its_tenants_quota_says(connect) -> None:
    for namespace, kept in (("short-history", 2), ("long-history", 4)):
        cf = connect(namespace)
        cf.create_store("history", dimension=2)
        (entry,) = cf.add_memories("history", [{"content": "v1", "vector": [1.0, 0.0]}])
        for n in range(2, 6):
            cf.update_memory(entry.id, content=f"v{n}", vector=[1.0, 0.0])
        expected = [f"v{n}" for n in range(4, 4 - kept, -1)]
        assert [v.memory.content for v in cf.list_memory_versions(entry.id)] == expected, namespace


def test_a_tenant_past_its_rate_is_told_when_to_retry(connect) -> None:
    limited, other = connect("slow-caller"), connect("fast-caller")
    refused = _refused(lambda: [list(limited.list_stores()) for _ in range(6)], "requests_per_second")
    assert "retry after" in refused.message
    assert [d for d in refused.details if type(d).__name__ == "ErrorInfo"]
    # The other tenant calls as fast as it likes.
    for _ in range(30):
        list(other.list_stores())


def test_what_a_tenant_did_is_counted_for_the_operator(postgres: Postgres, connect, quoted: ServerProcess) -> None:
    cf = connect("counted")
    cf.create_store("notes")
    cf.add_memories("notes", ["The user drinks green tea", "The user lives in Porto"])
    result = cf.inject([{"role": "user", "content": [{"text": "What do I drink?"}]}], stores=["notes"])
    assert result.report.injected

    def activity() -> dict:
        return tenants(postgres.url, "show", "counted")["activity"]

    # The workers add what they counted every few seconds.
    counted = wait_for(lambda: activity().get("calls:Inject") and activity(), 30, what="the usage to be added")
    assert counted["calls:AddMemories"] == 1 and counted["calls:Inject"] == 1
    assert counted["texts_embedded"] >= 3
    assert counted["tokens_injected"] == result.report.total_tokens
    assert tenants(postgres.url, "show", "counted")["usage"]["entries"] == 2
