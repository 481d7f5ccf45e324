"""Tenants and access: API keys map callers to a namespace and a role, and no tenant reaches another.

The adversarial suite runs twice: against the server as shipped, and against the
same server with every namespace predicate stripped from its SQL
(`tests/unscoped_server.py`), which shows Postgres row-level security alone keeps
the tenants apart. Another tenant's ids are NOT_FOUND, never PERMISSION_DENIED:
a caller cannot even learn that they exist.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import psycopg
import pytest
from contextfold import Client, NotFound
from contextfold.errors import Aborted, ContextfoldError, PermissionDenied, Unauthenticated
from contextfold.v1 import injection_pb2

from harness.messages import unique, user
from harness.polling import wait_for
from harness.servers import ROOT, Postgres, ServerProcess, provider_fixtures, start_server

KEYS = (sys.executable, "-m", "contextfold.cli", "keys")


def operator(command: str, database_url: str, *args: str) -> dict:
    """What an operator's command (`contextfold keys`, `contextfold tenants`) printed, as JSON."""
    done = subprocess.run(
        [sys.executable, "-m", "contextfold.cli", command, "--database-url", database_url, *args],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def keys(database_url: str, *args: str) -> dict:
    return operator("keys", database_url, *args)


@dataclass
class Tenants:
    database_url: str
    acme_admin: str
    acme_agent: str
    globex_admin: str


@pytest.fixture(scope="module")
def tenants(postgres: Postgres) -> Tenants:
    return Tenants(
        postgres.url,
        keys(postgres.url, "create", "--namespace", "acme", "--role", "admin")["key"],
        keys(postgres.url, "create", "--namespace", "acme", "--role", "agent", "--description", "acme's agents")["key"],
        keys(postgres.url, "create", "--namespace", "globex", "--role", "admin")["key"],
    )


@pytest.fixture(scope="module", params=["scoped in code and by RLS", "RLS alone"])
def server(request, tenants: Tenants, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    command = (sys.executable, "-m", "contextfold.cli", "serve")
    if request.param == "RLS alone":
        command = (sys.executable, "-m", "tests.unscoped_server")
    log = tmp_path_factory.mktemp("tenancy-server") / "server.log"
    # Caches reread every 2 s even without a notification (the safety net the last test checks).
    process = start_server(
        log, "--database-url", tenants.database_url, "--cache-reload-seconds", "2", "--auth", "keys", command=command
    )
    yield process
    assert process.stop() == 0, process.log()
    if request.param == "RLS alone":
        assert "unscoped: namespace predicates stripped" in process.log()


@pytest.fixture
def as_tenant(server: ServerProcess) -> Iterator[Callable[[str], Client]]:
    clients: list[Client] = []

    def connect(key: str) -> Client:
        clients.append(Client(server.address, timeout=30, api_key=key))
        return clients[-1]

    yield connect
    for client in clients:
        client.close()


def test_without_a_valid_key_nothing_is_served(server: ServerProcess, tenants: Tenants, as_tenant) -> None:
    for key in ("", "cfk_00000000_not-a-key", tenants.acme_admin + "x"):
        with pytest.raises(Unauthenticated) as refused:
            as_tenant(key).list_stores().__next__()
        assert refused.value.details[0].reason in ("API_KEY_REQUIRED", "API_KEY_INVALID")


def test_an_agent_key_cannot_manage_stores_or_providers(tenants: Tenants, as_tenant) -> None:
    agent = as_tenant(tenants.acme_agent)
    for call in (
        lambda: agent.create_store("agents-may-not"),
        lambda: agent.delete_store("agents-may-not"),
        lambda: agent.register_provider("p", "127.0.0.1:1"),
        lambda: list(agent.list_providers()),
    ):
        with pytest.raises(PermissionDenied) as denied:
            call()
        assert denied.value.details[0].reason == "ADMIN_ROLE_REQUIRED"
    # It may read stores and write memories in its namespace.
    store = unique("agent-writes")
    as_tenant(tenants.acme_admin).create_store(store)
    assert store in [s.name for s in agent.list_stores()]
    (added,) = agent.add_memories(store, ["An agent may remember"])
    assert agent.get_memory(added.id).content == "An agent may remember"


def test_two_tenants_never_see_each_other(server: ServerProcess, tenants: Tenants, as_tenant) -> None:
    acme, globex = as_tenant(tenants.acme_admin), as_tenant(tenants.globex_admin)
    suffix = server.address.rsplit(":", 1)[1]
    shared, acme_only = f"notes-{suffix}", f"acme-secrets-{suffix}"
    for tenant in (acme, globex):
        tenant.create_store(shared)
    acme.create_store(acme_only)
    secret = acme.add_memories(
        acme_only, [{"id": f"plan-{suffix}", "content": "Acme plans to acquire Initech", "user_id": "ceo"}]
    )[0]
    acme.add_memories(shared, [{"id": f"note-{suffix}", "content": "Acme's launch is on Friday", "user_id": "ceo"}])
    globex.add_memories(shared, [{"content": "Globex ships on Monday", "user_id": "ceo"}])

    # Stores: the same name in two namespaces is two stores; another's store does not exist.
    def stores(tenant: Client) -> dict[str, int]:
        """The tenant's stores of this run (the suite runs twice on one database)."""
        return {s.name: s.memory_count for s in tenant.list_stores() if s.name.endswith(suffix)}

    assert stores(globex) == {shared: 1}
    for call in (
        lambda: globex.add_memories(acme_only, ["planted"]),
        lambda: list(globex.list_memories(acme_only)),
        lambda: globex.search_memories("acquire", stores=[acme_only]),
        lambda: globex.delete_store(acme_only, force=True),
    ):
        with pytest.raises(NotFound):
            call()

    # Entries: guessed ids are NOT_FOUND, and deleting them changes nothing.
    with pytest.raises(NotFound):
        globex.get_memory(secret.id)
    with pytest.raises(NotFound):
        globex.delete_memories([secret.id])
    assert globex.delete_memories([secret.id], allow_missing=True) == 0
    # Its own entry under the same id is its own.
    mine = globex.add_memories(shared, [{"id": secret.id, "content": "Globex's own note"}])[0]
    assert globex.get_memory(secret.id).content == "Globex's own note" == mine.content
    assert acme.get_memory(secret.id).content == "Acme plans to acquire Initech"

    # Search, list, scope filters and Inject see the caller's namespace only.
    # Every ranking: the full-text search (run as the schema's owner) reads the caller's namespace too.
    for scope in (None, {"user_id": "ceo"}):
        for ranking in ("similarity", "store_aware", "hybrid"):
            found = globex.search_memories(
                "acquire Initech launch Friday", scope=scope, max_results=50, ranking=ranking
            )
            assert all("Acme" not in result.memory.content for result in found), ranking
    assert [m.content for m in globex.list_memories(shared, scope={"user_id": "ceo"})] == ["Globex ships on Monday"]
    result = globex.inject([user("When does the launch happen? Any acquisitions?")], max_entries=20)
    assert result.report.injected
    assert "Acme" not in json.dumps(result.messages)
    missing = globex.inject([user("acquisitions?")], stores=[acme_only])
    assert missing.report.skip_reason == injection_pb2.SKIP_REASON_FAILED
    assert missing.messages == [user("acquisitions?")]

    # Nothing of Acme's changed.
    assert {m.content for m in acme.list_memories(acme_only)} == {"Acme plans to acquire Initech"}
    assert stores(acme) == {shared: 1, acme_only: 1}


@pytest.fixture(scope="module")
def scripted_provider() -> Iterator[int]:
    """The scripted provider of `harness.providers`: its port."""
    with provider_fixtures() as ports:
        yield ports["scripted"]


def test_providers_are_per_tenant(server: ServerProcess, tenants: Tenants, as_tenant, scripted_provider: int) -> None:
    acme, globex = as_tenant(tenants.acme_admin), as_tenant(tenants.globex_admin)
    name = f"clock-{server.address.rsplit(':', 1)[1]}"
    target = f"127.0.0.1:{scripted_provider}"
    acme.register_provider(name, target, trigger="every_turn")
    says = {"texts": {name: "<acme-only/>"}}

    for call in (
        lambda: globex.get_provider(name),
        lambda: globex.update_provider(name, priority=5),
        lambda: globex.delete_provider(name),
    ):
        with pytest.raises(NotFound):
            call()
    assert name not in [provider.name for provider in globex.list_providers()]
    asked = globex.inject([user("what time is it?")], providers=[name], max_entries=0, app_state=says)
    assert "acme-only" not in json.dumps(asked.messages)
    assert [s.detail for s in asked.report.sources if s.source == name] == [f"provider {name!r} is not registered"]
    everyone = globex.inject([user("what time is it?")], max_entries=0, app_state=says)
    assert name not in [source.source for source in everyone.report.sources]
    assert "<acme-only/>" in json.dumps(acme.inject([user("time?")], max_entries=0, app_state=says).messages)
    # The same name in its own namespace is its own registration.
    globex.register_provider(name, "127.0.0.1:1")
    assert acme.get_provider(name).target == target


def works(client: Client) -> bool:
    try:
        list(client.list_stores())
    except Unauthenticated:
        return False
    return True


def test_a_new_key_works_and_a_revoked_one_stops_within_moments(tenants: Tenants, as_tenant) -> None:
    created = keys(tenants.database_url, "create", "--namespace", "acme", "--role", "agent")
    client = as_tenant(created["key"])
    wait_for(lambda: works(client), 10, what="the new key to work")
    keys(tenants.database_url, "revoke", created["id"])
    wait_for(lambda: not works(client), 10, what="the revoked key to stop working")
    listed = {key["id"]: key for key in keys(tenants.database_url, "list")}
    assert listed[created["id"]]["revoked"] is not None
    assert "key" not in listed[created["id"]]


def test_a_key_revoked_without_a_notification_stops_at_the_next_reload(tenants: Tenants, as_tenant) -> None:
    """A lost notification (a proxy dropped it, the listening connection is half-open) must not
    keep a revoked key working: the caches are reread on a timer as well."""
    created = keys(tenants.database_url, "create", "--namespace", "acme", "--role", "agent")
    client = as_tenant(created["key"])
    wait_for(lambda: works(client), 10, what="the new key to work")
    with psycopg.connect(tenants.database_url, autocommit=True) as conn:
        conn.execute("UPDATE contextfold.api_keys SET revoke_time = now() WHERE id = %s", (created["id"],))
    wait_for(lambda: not works(client), 10, what="the reload to drop the key revoked in silence")


def test_agents_hear_a_provider_is_unreachable_and_admins_hear_why(tenants: Tenants, as_tenant) -> None:
    """A dial error names what answers where ("Connection refused"): told to agents, it would make
    Inject a port scanner. Agents get the kind of failure; admins and the log get the story."""
    admin, agent = as_tenant(tenants.acme_admin), as_tenant(tenants.acme_agent)
    name = unique("down")
    admin.register_provider(name, "127.0.0.1:1")
    try:
        told = {}
        for who, client in (("agent", agent), ("admin", admin)):
            result = client.inject([user("go")], max_entries=0, providers=[name], timeout=10)
            (source,) = [s for s in result.report.sources if s.source == name]
            assert source.skip_reason == injection_pb2.SKIP_REASON_FAILED
            told[who] = source.detail
        assert told["agent"] == "unreachable"
        assert told["admin"].startswith("unreachable: ") and len(told["admin"]) > len("unreachable: ")
    finally:
        admin.delete_provider(name)


def test_a_page_token_is_good_for_its_own_tenant_only(server: ServerProcess, tenants: Tenants, as_tenant) -> None:
    import grpc
    from contextfold.v1 import memory_pb2, memory_pb2_grpc

    acme, globex = as_tenant(tenants.acme_admin), as_tenant(tenants.globex_admin)
    store = unique("paged")
    for tenant in (acme, globex):
        tenant.create_store(store)
        tenant.add_memories(store, [f"fact {n}" for n in range(3)])

    def list_page(key: str, token: str = "") -> memory_pb2.ListMemoriesResponse:
        with grpc.insecure_channel(server.address) as channel:
            return memory_pb2_grpc.MemoryServiceStub(channel).ListMemories(
                memory_pb2.ListMemoriesRequest(store=store, page_size=1, page_token=token),
                metadata=(("authorization", f"Bearer {key}"),),
                timeout=10,
            )

    acme_token = list_page(tenants.acme_admin).next_page_token
    assert list_page(tenants.acme_admin, acme_token).memories
    with pytest.raises(grpc.RpcError) as raised:
        list_page(tenants.globex_admin, acme_token)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert raised.value.details() == "page_token: belongs to a request with other parameters"


def test_a_namespace_uses_a_bounded_number_of_vector_dimensions(tenants: Tenants, as_tenant) -> None:
    """Each dimension has an index of its own that every tenant's writes keep up: a tenant may not
    make the service build hundreds. Another tenant's dimensions do not count against it."""
    from contextfold.errors import ResourceExhausted
    from contextfold_server.memory.store import MAX_DIMENSIONS_PER_NAMESPACE

    globex, acme = as_tenant(tenants.globex_admin), as_tenant(tenants.acme_admin)
    used = {store.dimension for store in globex.list_stores()}
    for dimension in range(100, 100 + MAX_DIMENSIONS_PER_NAMESPACE):
        if len(used) < MAX_DIMENSIONS_PER_NAMESPACE:
            globex.create_store(unique(f"d{dimension}"), dimension=dimension)
            used.add(dimension)
    with pytest.raises(ResourceExhausted) as refused:
        globex.create_store(unique("one-more"), dimension=99)
    assert refused.value.details[0].reason == "DIMENSIONS_PER_NAMESPACE"
    # A dimension it already uses is fine, as is the same new dimension for another tenant.
    globex.create_store(unique("again"), dimension=max(used))
    acme.create_store(unique("acme-99"), dimension=99)


def test_erasure_reaches_every_store_of_one_scope_and_nothing_else(
    server: ServerProcess, tenants: Tenants, as_tenant
) -> None:
    acme, globex = as_tenant(tenants.acme_admin), as_tenant(tenants.globex_admin)
    stores = [unique("erase-a"), unique("erase-b")]
    for store in stores:
        for tenant in (acme, globex):
            tenant.create_store(store)
            tenant.add_memories(
                store,
                [
                    {"content": f"{user_id} fact {n}", "user_id": user_id, "metadata": {"n": n}}
                    for user_id in ("u1", "u2")
                    for n in range(3)
                ],
            )
    corrected = next(m for m in acme.list_memories(stores[0], scope={"user_id": "u1"}))
    acme.update_memory(corrected.id, content="u1 fact, corrected")

    with pytest.raises(PermissionDenied) as denied:
        as_tenant(tenants.acme_agent).erase_memories(scope={"user_id": "u1"})
    assert denied.value.details[0].reason == "ADMIN_ROLE_REQUIRED"

    with pytest.raises(PermissionDenied):
        as_tenant(tenants.acme_agent).erase_memories(scope={"user_id": "u1"}, validate_only=True)
    # Counted first, as a confirmation shows it: nothing is erased by counting.
    assert acme.erase_memories(scope={"user_id": "u1"}, stores=stores, validate_only=True) == 6
    held = sum(len(list(acme.list_memories(store.name, scope={"user_id": "u1"}))) for store in acme.list_stores())
    assert acme.erase_memories(scope={"user_id": "u1"}, validate_only=True) == held, "every store of the tenant"
    assert acme.erase_memories(scope={"user_id": "u1"}, filter={"n": 0}, validate_only=True) == 2
    assert len(list(acme.list_memories(stores[0], scope={"user_id": "u1"}))) == 3
    assert acme.erase_memories(scope={"user_id": "u1"}, stores=stores) == 6
    assert acme.erase_memories(scope={"user_id": "u1"}, stores=stores) == 0, "a retry finds nothing left"
    assert acme.erase_memories(scope={"user_id": "u1"}, stores=stores, validate_only=True) == 0
    for store in stores:
        assert {m.user_id for m in acme.list_memories(store)} == {"u2"}
        assert len(list(globex.list_memories(store, scope={"user_id": "u1"}))) == 3, "the other tenant keeps all"
    with psycopg.connect(tenants.database_url, autocommit=True) as conn:
        versions = conn.execute("SELECT count(*) FROM contextfold.memory_versions WHERE id = %s", (corrected.id,))
        assert versions.fetchone() == (0,), "the versions went with the entry"

    # A filter across stores; a key bound to a user erases within its user only, whatever it names.
    assert acme.erase_memories(filter={"n": {"gte": 2}}, stores=stores) == 2
    bound = keys(tenants.database_url, "create", "--namespace", "acme", "--role", "agent", "--user-id", "u2")
    own = as_tenant(bound["key"])
    wait_for(lambda: works(own), 10, what="the new key to work")
    with pytest.raises(PermissionDenied) as elsewhere:
        own.erase_memories(scope={"user_id": "u1"})
    assert elsewhere.value.details[0].reason == "SCOPE_BOUND_KEY"
    assert own.erase_memories(filter={"n": 0}, stores=stores) == 2
    assert sorted(m.content for store in stores for m in acme.list_memories(store)) == ["u2 fact 1", "u2 fact 1"]
    assert sum(len(list(globex.list_memories(store))) for store in stores) == 12


def test_updates_versions_and_exports_stay_in_their_namespace_and_scope(
    server: ServerProcess, tenants: Tenants, as_tenant
) -> None:
    acme, globex = as_tenant(tenants.acme_admin), as_tenant(tenants.globex_admin)
    store = unique("lifecycle")
    acme.create_store(store)
    (mine,) = acme.add_memories(store, [{"content": "Acme's roadmap", "user_id": "u1"}])
    acme.update_memory(mine.id, content="Acme's roadmap, revised")
    for call in (
        lambda: globex.update_memory(mine.id, content="defaced"),
        lambda: list(globex.list_memory_versions(mine.id)),
        lambda: list(globex.export_memories(stores=[store])),
    ):
        with pytest.raises(NotFound):
            call()
    bound = keys(tenants.database_url, "create", "--namespace", "acme", "--role", "agent", "--user-id", "u2")
    other_user = as_tenant(bound["key"])
    wait_for(lambda: works(other_user), 10, what="the new key to work")
    with pytest.raises(NotFound):
        other_user.update_memory(mine.id, content="defaced")
    with pytest.raises(NotFound):
        list(other_user.list_memory_versions(mine.id))
    exported = [m for part in other_user.export_memories(stores=[store]) for m in part.memories]
    assert exported == []
    with pytest.raises(PermissionDenied):
        other_user.update_memory(unique("upsert"), content="x", store=store, user_id="u1", allow_missing=True)
    assert acme.get_memory(mine.id).content == "Acme's roadmap, revised"
    assert [v.memory.content for v in acme.list_memory_versions(mine.id)] == ["Acme's roadmap"]
    with pytest.raises(PermissionDenied) as import_denied:
        as_tenant(tenants.acme_agent).import_memories([])
    assert import_denied.value.details[0].reason == "ADMIN_ROLE_REQUIRED"


def test_a_filter_finds_its_own_tenants_entries_only(server: ServerProcess, tenants: Tenants, as_tenant) -> None:
    """A filter few entries pass is read exactly, through the metadata index's holders (run as the
    schema's owner): they are the caller's namespace's only, whatever another tenant's metadata says."""
    acme, globex = as_tenant(tenants.acme_admin), as_tenant(tenants.globex_admin)
    store = unique("filtered")
    for tenant in (acme, globex):
        tenant.create_store(store)
    acme.add_memories(store, [{"content": f"Acme secret {n}", "metadata": {"project": "falcon"}} for n in range(3)])
    (own,) = globex.add_memories(store, [{"content": "Globex falcon notes", "metadata": {"project": "falcon"}}])
    for ranking in ("similarity", "store_aware"):
        found = globex.search_memories(
            "falcon", stores=[store], filter={"project": "falcon"}, max_results=10, ranking=ranking
        )
        assert [result.memory.id for result in found] == [own.id], ranking
    assert [m.id for m in globex.list_memories(store, filter={"project": {"in": ["falcon", "eagle"]}})] == [own.id]
    assert len(acme.search_memories("falcon", stores=[store], filter={"project": "falcon"}, max_results=10)) == 3


# A key bound to one user, against another user's ids, history, words and the namespace's providers.


def _answer(probe: Callable[[str], object], given: str) -> tuple:
    """What `probe` answered for the id `given`, with that id written as `<id>`: two ids are told apart
    by nothing but themselves when their answers are equal."""
    try:
        result = probe(given)
    except ContextfoldError as error:
        return (error.code.name, error.reason, error.message.replace(given, "<id>"))
    if isinstance(result, list):
        return ("OK", [_shape(item, given) for item in result])
    return ("OK", _shape(result, given))


def _shape(result: object, given: str) -> object:
    if isinstance(result, int):
        return result
    memory = getattr(result, "memory", result)
    created = getattr(result, "created", None)
    # A new entry's id is the key's scope's own (`<id>~` and a keyed hash): the same shape either way.
    return (
        memory.id.replace(given, "<id>").split("~")[0],
        len(memory.id) - len(given),
        memory.user_id,
        memory.content,
        created,
    )


@pytest.fixture
def alice_and_bob(server: ServerProcess, tenants: Tenants, as_tenant) -> tuple[Client, Client, str]:
    """An unbound admin, a key bound to alice (an admin key, even), and a store holding bob's entries."""
    operator = as_tenant(tenants.acme_admin)
    store = unique("bound")
    operator.create_store(store, dimension=8)
    alice = as_tenant(
        keys(tenants.database_url, "create", "--namespace", "acme", "--role", "admin", "--user-id", "alice")["key"]
    )
    wait_for(lambda: works(alice), 10, what="the new key to work")
    return operator, alice, store


def test_a_bound_key_finds_another_users_ids_as_it_finds_free_ones(alice_and_bob) -> None:
    operator, alice, store = alice_and_bob
    taken, free = unique("bob"), unique("free")
    operator.add_memories(
        store, [{"id": taken, "content": "Bob's locker code is 7788", "user_id": "bob", "vector": [1] * 8}]
    )
    operator.update_memory(taken, content="Bob's locker code is 9911", vector=[1] * 8)
    probes = {
        "get": lambda id: alice.get_memory(id),
        "delete": lambda id: alice.delete_memories([id]),
        "delete, allowing missing": lambda id: alice.delete_memories([id], allow_missing=True),
        "update": lambda id: alice.update_memory(id, content="Alice's note", vector=[1] * 8),
        "versions": lambda id: list(alice.list_memory_versions(id)),
        "upsert": lambda id: alice.update_memory(
            id, content="Alice's note", vector=[1] * 8, store=store, allow_missing=True
        ),
        "add": lambda id: alice.add_memories(store, [{"id": id, "content": "Alice's note", "vector": [1] * 8}]),
    }
    for name, probe in probes.items():
        assert _answer(probe, taken) == _answer(probe, f"{free}-{name[:3]}"), name
    # Bob's entry is as it was, with its history; alice's entries are hers.
    assert operator.get_memory(taken).content == "Bob's locker code is 9911"
    assert [v.memory.content for v in operator.list_memory_versions(taken)] == ["Bob's locker code is 7788"]
    assert {m.user_id for m in operator.list_memories(store)} == {"alice", "bob"}
    # The same id from the same key makes the same entry: an add and an upsert stay retry-safe.
    (again,) = alice.add_memories(store, [{"id": taken, "content": "Alice's note", "vector": [1] * 8}])
    assert again.id != taken and again.id.startswith(taken + "~")
    assert alice.get_memory(again.id).content == "Alice's note"


def test_a_bound_key_may_not_import_manage_providers_or_delete_a_store(alice_and_bob, tenants: Tenants) -> None:
    from contextfold.v1 import memory_pb2

    operator, alice, store = alice_and_bob
    taken = unique("bob")
    operator.add_memories(store, [{"id": taken, "content": "Bob's plan", "user_id": "bob", "vector": [1] * 8}])
    imported = memory_pb2.ImportMemoriesRequest(
        memories=[memory_pb2.Memory(id=taken, store=store, content="Alice's now", vector=[1] * 8)]
    )
    for call in (
        lambda: alice.import_memories([imported]),
        lambda: alice.register_provider("listener", "127.0.0.1:9", trigger="every_turn"),
        lambda: list(alice.list_providers()),
        lambda: alice.delete_store(store, force=True),
    ):
        with pytest.raises(PermissionDenied) as denied:
            call()
        assert denied.value.reason == "SCOPE_BOUND_KEY"
    assert operator.get_memory(taken).content == "Bob's plan" and operator.get_memory(taken).user_id == "bob"


def test_a_bound_key_never_reads_what_an_entry_was_while_it_was_another_users(alice_and_bob) -> None:
    operator, alice, store = alice_and_bob
    moved = unique("moved")
    operator.add_memories(store, [{"id": moved, "content": "Bob's diagnosis", "user_id": "bob", "vector": [1] * 8}])
    operator.update_memory(moved, content="Alice's now", user_id="alice", vector=[1] * 8)
    assert alice.get_memory(moved).content == "Alice's now"
    assert list(alice.list_memory_versions(moved)) == []
    assert [v.memory.content for v in operator.list_memory_versions(moved)] == ["Bob's diagnosis"]


def test_remembered_turns_get_ids_nobody_can_compute_from_the_words(alice_and_bob) -> None:
    import hashlib

    operator, alice, _ = alice_and_bob
    store = unique("remembered")
    operator.create_store(store)
    said = "My locker code is 4242"
    remembered = alice.remember(store, [user(said)], conversation_id="c1")
    (entry,) = [m.memory for m in remembered.memories]
    assert entry.user_id == "alice"
    # The public hash Remember used to derive ids from: what anyone could compute for a guessed sentence.
    plain = json.dumps([store, "alice", "", "", "c1", "user", said], ensure_ascii=False, separators=(",", ":"))
    assert entry.id != f"turn-{hashlib.sha256(plain.encode()).hexdigest()[:32]}"
    assert entry.id.startswith("turn-") and len(entry.id) == len("turn-") + 32
    # Keyed with the service's secret, it is still the same for the same turn: remembered once.
    assert alice.remember(store, [user(said)], conversation_id="c1").remembered_turn_count == 0


def test_a_words_rarity_is_judged_among_the_entries_the_caller_may_see(alice_and_bob) -> None:
    operator, alice, store = alice_and_bob
    query = [1.0] + [0.0] * 7
    # Alice's twenty entries, near the query's vector; her incident note points away from it.
    operator.add_memories(
        store,
        [
            {
                "content": f"Alice's note {n} about the weekly sync",
                "user_id": "alice",
                "vector": [1.0, 0.1 * n] + [0.0] * 6,
            }
            for n in range(20)
        ]
        + [
            {
                "id": unique("incident"),
                "content": "Incident INC-4242 took the site down",
                "user_id": "alice",
                "vector": [-1.0] + [0.0] * 7,
            }
        ],
    )

    def found() -> list[str]:
        results = alice.search_memories("INC-4242", query_vector=query, stores=[store], ranking="hybrid", max_results=5)
        return [result.memory.content for result in results]

    # Its vector alone would rank it last of her 21: the word it alone holds brings it into her five.
    assert "Incident INC-4242 took the site down" in found(), "a word only one of her entries holds lifts it"
    # Many of bob's entries hold the same word: what alice's search is told does not change.
    operator.add_memories(
        store,
        [{"content": f"INC-4242 follow-up {n}", "user_id": "bob", "vector": [0.0, 1.0] + [0.0] * 6} for n in range(60)],
    )
    assert "Incident INC-4242 took the site down" in found()


def test_an_etag_tells_nothing_of_other_tenants_writes(server: ServerProcess, tenants: Tenants, as_tenant) -> None:
    acme, globex = as_tenant(tenants.acme_admin), as_tenant(tenants.globex_admin)
    store = unique("etags")
    for tenant in (acme, globex):
        tenant.create_store(store)
    (first,) = acme.add_memories(store, [{"content": "one"}])
    globex.add_memories(store, [{"content": f"other {n}"} for n in range(7)])
    (second,) = acme.add_memories(store, [{"content": "two"}])
    for etag in (first.etag, second.etag):
        assert re.fullmatch(r"[A-Za-z0-9_-]{22}", etag), etag
    updated = acme.update_memory(first.id, content="one, revised").memory
    assert updated.etag not in (first.etag, second.etag)
    with pytest.raises(Aborted) as stale:
        acme.update_memory(first.id, content="lost", etag=first.etag)
    assert stale.value.reason == "ETAG_MISMATCH"
    assert updated.etag not in stale.value.message and first.etag not in stale.value.message
