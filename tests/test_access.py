"""Access modes: closed unless the operator opens it, whatever keys exist; an open service is kept away
from every tenant's namespace; the role that serves requests never reads the keys."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from collections.abc import Iterator

import grpc
import psycopg
import pytest
from contextfold import Client
from contextfold.errors import Unauthenticated
from contextfold.v1 import memory_pb2, memory_pb2_grpc
from contextfold_server.access.keys import OPEN_NAMESPACE
from contextfold_server.postgres.migrations import migrate
from contextfold_server.postgres.schema import SERVICE_ROLE

from harness.polling import wait_for
from harness.servers import ROOT, Postgres, ServerProcess, start_server

from .test_tenancy import KEYS


@pytest.fixture(scope="module")
def closed(postgres: Postgres, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A server that requires keys (the default), started before any key exists."""
    log = tmp_path_factory.mktemp("access-server") / "server.log"
    server = start_server(log, "--database-url", postgres.url, "--auth", "keys", "--cache-reload-seconds", "2")
    yield server
    assert server.stop() == 0, server.log()


def keys(postgres: Postgres, *args: str) -> dict:
    done = subprocess.run(
        [*KEYS, "--database-url", postgres.url, *args], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def refused(address: str, key: str = "") -> bool:
    with Client(address, api_key=key, timeout=10) as cf:
        try:
            next(iter(cf.list_stores()), None)
        except Unauthenticated:
            return True
    return False


def test_with_no_key_ever_created_every_call_is_refused(closed: ServerProcess) -> None:
    assert refused(closed.address)
    assert "no active API keys: every call is refused" in closed.log()


def test_revoking_every_key_keeps_the_service_closed(closed: ServerProcess, postgres: Postgres) -> None:
    created = keys(postgres, "create", "--namespace", "solo", "--role", "admin")
    wait_for(lambda: not refused(closed.address, created["key"]), 10, what="the new key to work")
    assert refused(closed.address), "an anonymous call is refused while a key exists"

    keys(postgres, "revoke", created["id"])
    wait_for(lambda: refused(closed.address, created["key"]), 10, what="the revoked key to stop working")
    # The last key revoked (a compromised one, say): the service stays closed, never opens.
    assert refused(closed.address)
    assert refused(closed.address, "cfk_00000000_guess")


def test_two_authorization_headers_are_refused_even_when_both_are_valid(
    closed: ServerProcess, postgres: Postgres
) -> None:
    first = keys(postgres, "create", "--namespace", "one", "--role", "admin")["key"]
    second = keys(postgres, "create", "--namespace", "two", "--role", "admin")["key"]
    wait_for(lambda: not refused(closed.address, second), 10, what="the new keys to work")
    with grpc.insecure_channel(closed.address) as channel:
        stub = memory_pb2_grpc.MemoryServiceStub(channel)
        with pytest.raises(grpc.RpcError) as raised:
            stub.ListStores(
                memory_pb2.ListStoresRequest(),
                metadata=(("authorization", f"Bearer {first}"), ("authorization", f"Bearer {second}")),
                timeout=10,
            )
    assert raised.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert "one `authorization` header" in raised.value.details()


def test_the_request_role_cannot_read_the_keys(closed: ServerProcess, postgres: Postgres) -> None:
    with psycopg.connect(postgres.url, autocommit=True) as conn:
        conn.execute(f"SET ROLE {SERVICE_ROLE}")
        for table in ("api_keys", "service_secrets"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(f"SELECT * FROM contextfold.{table}")


def test_no_key_can_name_the_open_namespace(postgres: Postgres) -> None:
    done = subprocess.run(
        [*KEYS, "--database-url", postgres.url, "create", "--namespace", OPEN_NAMESPACE, "--role", "admin"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 1 and "namespace must be" in done.stderr


def test_an_open_server_acts_in_the_open_namespace_only(tmp_path, postgres: Postgres) -> None:
    tenant_key = keys(postgres, "create", "--namespace", "default", "--role", "admin")["key"]
    server = start_server(tmp_path / "open.log", "--database-url", postgres.url, "--auth", "none")
    try:
        assert "the service is OPEN (--auth none)" in server.log()
        with Client(server.address) as anonymous:
            anonymous.create_store("open-notes")
            anonymous.add_memories("open-notes", ["written by anyone on this machine"])
            # A key changes nothing on an open server: every caller is the open namespace's.
            with Client(server.address, api_key=tenant_key) as keyed:
                assert "open-notes" in [store.name for store in keyed.list_stores()]
    finally:
        assert server.stop() == 0, server.log()
    with psycopg.connect(postgres.url, autocommit=True) as conn:
        rows = conn.execute("SELECT DISTINCT namespace FROM contextfold.stores WHERE name = 'open-notes'").fetchall()
    assert rows == [(OPEN_NAMESPACE,)], "not `default`, which a tenant's key names"


def test_what_an_open_service_kept_in_default_moves_to_the_open_namespace(tmp_path, fresh_postgres: Postgres) -> None:
    asyncio.run(migrate(fresh_postgres.url))
    with psycopg.connect(fresh_postgres.url, autocommit=True) as conn:
        # As an open service of an earlier version left it: a store and an entry in `default`.
        conn.execute("INSERT INTO contextfold.stores (namespace, name, dimension) VALUES ('default', 'old-notes', 2)")
        conn.execute(
            "INSERT INTO contextfold.memories (namespace, id, store, content, dimension, embedding)"
            " VALUES ('default', 'old-1', 'old-notes', 'kept from before', 2, '[1,0]')"
        )
        conn.execute("DELETE FROM contextfold.migrations WHERE version = 7")
    asyncio.run(migrate(fresh_postgres.url))
    with psycopg.connect(fresh_postgres.url, autocommit=True) as conn:
        moved = conn.execute("SELECT namespace, store FROM contextfold.memories WHERE id = 'old-1'").fetchall()
        stores = conn.execute("SELECT namespace FROM contextfold.stores WHERE name = 'old-notes'").fetchall()
        forced = conn.execute(
            "SELECT bool_and(relforcerowsecurity) FROM pg_class WHERE oid IN"
            " ('contextfold.stores'::regclass, 'contextfold.memories'::regclass, 'contextfold.providers'::regclass)"
        ).fetchone()
    assert moved == [(OPEN_NAMESPACE, "old-notes")] and stores == [(OPEN_NAMESPACE,)]
    assert forced == (True,), "row-level security is forced again after the move"


def test_a_key_bound_to_a_user_is_confined_to_that_user(closed: ServerProcess, postgres: Postgres) -> None:
    from contextfold import NotFound, PermissionDenied

    admin = keys(postgres, "create", "--namespace", "shared-app", "--role", "admin")["key"]
    # An admin key, even: being bound to a user confines it all the same.
    alice = keys(postgres, "create", "--namespace", "shared-app", "--role", "admin", "--user-id", "alice")
    assert alice["user_id"] == "alice"
    wait_for(lambda: not refused(closed.address, alice["key"]), 10, what="the new keys to work")
    with Client(closed.address, api_key=admin) as operator, Client(closed.address, api_key=alice["key"]) as bound:
        operator.create_store("notes")
        operator.add_memories(
            "notes",
            [
                {"id": "a1", "content": "Alice's cat is called Miso", "user_id": "alice"},
                {"id": "b1", "content": "Bob's cat is called Tofu", "user_id": "bob"},
                {"id": "n1", "content": "The office cat is called Natto"},
            ],
        )
        # Without naming a scope, the bound key sees its user's entries only, whatever it asks.
        assert [m.id for m in bound.list_memories("notes")] == ["a1"]
        assert {r.memory.id for r in bound.search_memories("cat", stores=["notes"], max_results=10)} == {"a1"}
        result = bound.inject([{"role": "user", "content": [{"text": "What is my cat called?"}]}], stores=["notes"])
        assert [entry.id for entry in result.report.entries] == ["a1"]
        # Another user's entries do not exist for it.
        with pytest.raises(NotFound):
            bound.get_memory("b1")
        with pytest.raises(NotFound):
            bound.delete_memories(["b1"])
        assert operator.get_memory("b1").content == "Bob's cat is called Tofu"
        # What it writes is its user's; naming another user is refused, as is removing a whole store.
        (written,) = bound.add_memories("notes", ["Alice prefers tea"])
        assert operator.get_memory(written.id).user_id == "alice"
        # Even a count of the others' entries is not the bound key's to see.
        assert {s.name: s.memory_count for s in bound.list_stores()} == {"notes": 2}
        assert {s.name: s.memory_count for s in operator.list_stores()} == {"notes": 4}
        for call in (
            lambda: bound.add_memories("notes", [{"content": "Bob likes coffee", "user_id": "bob"}]),
            lambda: bound.search_memories("cat", scope={"user_id": "bob"}),
            lambda: list(bound.list_memories("notes", scope={"user_id": "bob"})),
            lambda: bound.delete_store("notes", force=True),
        ):
            with pytest.raises(PermissionDenied) as denied:
                call()
            assert denied.value.details[0].reason == "SCOPE_BOUND_KEY"
        assert bound.delete_memories(["a1"]) == 1


def test_requests_may_log_in_as_a_role_that_owns_nothing(tmp_path, fresh_postgres: Postgres) -> None:
    """Production's two roles: the schema owner migrates (and reads the keys); requests log in as a
    role that owns nothing, so row-level security binds them, and that cannot read the keys."""
    with psycopg.connect(fresh_postgres.url, autocommit=True) as conn:
        conn.execute("CREATE ROLE contextfold_app LOGIN")
    serving_url = fresh_postgres.url.replace("postgresql://postgres:@", "postgresql://contextfold_app:@")
    assert serving_url != fresh_postgres.url
    server = start_server(
        tmp_path / "server.log",
        "--database-url",
        serving_url,
        "--database-migration-url",
        fresh_postgres.url,
        "--auth",
        "none",
    )
    try:
        with Client(server.address) as cf:
            cf.create_store("notes")
            (added,) = cf.add_memories("notes", ["The user's boat is called Tern"])
            result = cf.inject([{"role": "user", "content": [{"text": "What is my boat called?"}]}], stores=["notes"])
            assert [entry.id for entry in result.report.entries] == [added.id]
    finally:
        assert server.stop() == 0, server.log()
    with psycopg.connect(serving_url, autocommit=True) as conn:
        owners = conn.execute("SELECT DISTINCT tableowner FROM pg_tables WHERE schemaname = 'contextfold'").fetchall()
        assert owners == [("postgres",)]
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SELECT * FROM contextfold.api_keys")
        # Without a namespace set, row-level security shows it nothing.
        assert conn.execute("SELECT count(*) FROM contextfold.memories").fetchone() == (0,)


def test_a_read_acts_for_its_namespace_in_one_transaction_and_the_connection_for_no_one_after(
    postgres: Postgres,
) -> None:
    """A read's statements run in one transaction, its namespace and settings set for it alone: the
    same pooled connection, read again without a namespace, after a read that went well and after
    ones that failed (an error, a statement past its time), acts for no one."""
    from contextfold_server.errors import StatementTimeout
    from contextfold_server.postgres.pool import Database, Read

    acting = "SELECT current_setting('contextfold.namespace', true) AS namespace, txid_current() AS xid"
    setting = "SELECT current_setting('hnsw.ef_search') AS ef_search, txid_current() AS xid"
    both = (
        "SELECT current_setting('contextfold.namespace', true) AS namespace,"
        " current_setting('hnsw.ef_search') AS ef_search"
    )

    async def check() -> None:
        await migrate(postgres.url)
        database = await Database.open(postgres.url, min_size=1, max_size=1)
        try:
            first, second = await database.read_all(
                "tenant-a", [Read(acting, ()), Read(setting, (), {"hnsw.ef_search": "77"})]
            )
            assert first[0]["namespace"] == "tenant-a" and second[0]["ef_search"] == "77"
            assert first[0]["xid"] == second[0]["xid"]
            failing = [
                (Read("SELECT 1 / 0", ()), psycopg.errors.DivisionByZero),
                (Read("SELECT pg_sleep(1)", (), {"statement_timeout": "50ms"}), StatementTimeout),
            ]
            for read, refused in failing:
                with pytest.raises(refused):
                    await database.read_all("tenant-a", [read])
                ((after,),) = await database.read_all("", [Read(both, ())])
                assert after["namespace"] == "" and after["ef_search"] != "77", read
        finally:
            await database.close()

    asyncio.run(check())


def test_reads_go_side_by_side_only_on_connections_nobody_else_needs(postgres: Postgres) -> None:
    """A search's reads asked `apart` run on as many connections at once as are spare, split at the places it
    names in the order it names them (the first on two, the first two on three), each transaction acting for the
    namespace; on one, as one transaction, once the pool is more than half taken or the tenant holds its share;
    and a read that fails stops the others and gives every connection back."""
    from contextfold_server.postgres.pool import Database, PoolLimits, Read

    who = Read("SELECT pg_backend_pid() AS pid, current_setting('contextfold.namespace', true) AS namespace", ())

    async def backends(
        database: Database, namespace: str = "tenant-a", reads: int = 2, apart: tuple[int, ...] = (1,)
    ) -> list[int]:
        """Each read's backend, in the order of the reads."""
        found = await database.read_all(namespace, [who] * reads, apart=apart)
        assert {rows[0]["namespace"] for rows in found} == {namespace}
        return [rows[0]["pid"] for rows in found]

    async def check() -> None:
        await migrate(postgres.url)
        database = await Database.open(postgres.url, min_size=4, max_size=4)
        shared = await Database.open(postgres.url, min_size=4, max_size=8, limits=PoolLimits(per_tenant=1))
        roomy = await Database.open(postgres.url, min_size=6, max_size=6)
        try:
            assert len(set(await backends(database))) == 2
            first, rest = await database.read_all("tenant-a", [who, who])
            assert first[0]["pid"] == rest[0]["pid"]
            # Three places asked for, and a pool of six: each part on its own; of four, a second would leave it more
            # than half taken with a third: split at the first place named, the first two reads together.
            assert len(set(await backends(roomy, reads=3, apart=(2, 1)))) == 3
            one, two, three = await backends(database, reads=3, apart=(2, 1))
            assert one == two != three
            # Another caller holds one of the four: a second would leave the pool more than half taken.
            async with database.connection("tenant-b"):
                assert len(set(await backends(database))) == 1
            # Another holds one of the six: two at once, split where the first place says.
            async with roomy.connection("tenant-b"):
                one, two, three = await backends(roomy, reads=3, apart=(2, 1))
                assert one == two != three
            # The tenant's share is one connection: its search reads on that one, whatever is free.
            assert len(set(await backends(shared))) == 1
            with pytest.raises(psycopg.errors.DivisionByZero):
                await database.read_all("tenant-a", [who, Read("SELECT 1 / 0", ())], apart=(1,))
            # One failing stops the others, however long they had to run: the call does not wait for them.
            started = time.monotonic()
            with pytest.raises(psycopg.errors.DivisionByZero):
                await roomy.read_all(
                    "tenant-a",
                    [Read("SELECT pg_sleep(5)", ()), Read("SELECT pg_sleep(5)", ()), Read("SELECT 1 / 0", ())],
                    apart=(2, 1),
                )
            assert time.monotonic() - started < 2.5
            # Every one went back: the pools are as idle as they were, and a search has its connections again.
            assert len(set(await backends(database))) == 2
            assert len(set(await backends(roomy, reads=3, apart=(2, 1)))) == 3
        finally:
            await database.close()
            await shared.close()
            await roomy.close()

    asyncio.run(check())
