"""The schema is ready to be sharded by namespace (a distributed Postgres such as Citus, the namespace
the distribution column; docs/deploy.md "Past one primary").

What that needs, held here on the migrated schema and on every statement a server sends while it
serves each kind of call (read from Postgres' own log of them, with their parameters):
- every table is either service-wide (`SERVICE_WIDE`, each saying why: reference tables there) or
  holds tenant data, with a `namespace` column (its row-level security, where it has it, on it), and
  `namespace` in its primary key, in each unique constraint or index, and on both sides of each
  foreign key;
- no statement joins across namespaces: each one that reads a tenant table compares `namespace` to
  one namespace only, once for each tenant table it reads (a statement naming none reads each
  namespace's rows of one table, which a sharded database runs on every shard, joining nothing);
  the functions the statements call compare it to their own argument or the namespace the
  connection acts for.
"""

from __future__ import annotations

import re
import time

import pytest
from contextfold import Client

from harness.messages import assistant, unique, user
from harness.servers import Postgres, start_server

from .pages import section

# Tables that hold no tenant's data, or that are looked up across tenants: replicated whole to every node
# (reference tables) when sharded.
SERVICE_WIDE = {
    "migrations": "the schema's version",
    "service_secrets": "keys every replica shares",
    "api_keys": "a key is looked up by its hash before its namespace is known",
}
# A comparison of a namespace with a value: a statement's parameter, a function's argument, the namespace the
# connection acts for (as its policies read it).
_COMPARED = re.compile(
    r"\bnamespace\s*=\s*(\$\d+|p_namespace|current_setting\('contextfold\.namespace'(?:::text)?(?:,\s*true)?\))", re.I
)
_PARAMETER = re.compile(r"\$(\d+) = (NULL|'(?:[^']|'')*')")
_LOGGED = re.compile(r"LOG:\s+(?:execute [^:]*|statement): (.*)")


@pytest.fixture(scope="module")
def database(postgres: Postgres) -> Postgres:
    return postgres


@pytest.fixture(scope="module")
def logged(database: Postgres, tmp_path_factory: pytest.TempPathFactory) -> list[tuple[str, dict[str, str]]]:
    """Every statement a server sent while it served each kind of call, with its parameters."""
    database.query("ALTER SYSTEM SET log_statement = 'all'")
    database.query("SELECT pg_reload_conf()")
    server = start_server(tmp_path_factory.mktemp("sharding-server") / "server.log", "--database-url", database.url)
    try:
        with Client(server.address, timeout=30) as cf:
            store = unique("notes")
            cf.create_store(store)
            cf.add_memories(
                store,
                [
                    {"id": "office", "content": "The office is in Lisbon", "session_id": "s1"},
                    {"id": "standup", "content": "Standup is at ten", "session_id": "s1", "metadata": {"team": "a"}},
                ],
            )
            for ranking in ("similarity", "store_aware", "hybrid"):
                cf.search_memories("where is the office", stores=[store], ranking=ranking)
            cf.search_memories("office", stores=[store], filter={"team": "a"}, scope={"user_id": "ana"})
            cf.inject([user("Where is the office, and when is standup?")], stores=[store])
            cf.remember(store, [user("I moved to Porto last week"), assistant("Noted!")], scope={"user_id": "ana"})
            list(cf.list_memories(store))
            cf.get_memory("office")
            cf.update_memory("office", content="The office is in Porto")
            cf.delete_memories(["standup"])
            cf.register_provider(unique("clock"), "127.0.0.1:9", timeout=1)
            cf.delete_store(store, force=True)
    finally:
        server.stop()
    database.query("ALTER SYSTEM RESET log_statement")
    database.query("SELECT pg_reload_conf()")
    time.sleep(0.2)
    statements: list[tuple[str, dict[str, str]]] = []
    for line in database.log().splitlines():
        if (found := _LOGGED.search(line)) is not None:
            statements.append((found.group(1), {}))
        elif "DETAIL:  Parameters:" in line and statements:
            statements[-1] = (statements[-1][0], dict(_PARAMETER.findall(line)))
    assert any("contextfold.memories" in text or '"memories"' in text for text, _ in statements)
    return statements


def _tenant_tables(database: Postgres) -> list[str]:
    tables = [name for (name,) in database.query("SELECT tablename FROM pg_tables WHERE schemaname = 'contextfold'")]
    return sorted(set(tables) - set(SERVICE_WIDE))


def _reads(text: str, tables: list[str]) -> int:
    """How many times `text` names one of `tables` (quoted or not, always schema-qualified)."""
    names = "|".join(tables)
    return len(re.findall(rf'"?contextfold"?\."?(?:{names})"?\b', text))


def test_every_tenant_table_keys_and_references_by_namespace(database: Postgres, logged: list) -> None:
    tables = _tenant_tables(database)
    assert {"memories", "stores", "providers"} <= set(tables)
    for table in tables:
        ((has_namespace, secured),) = database.query(
            "SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = c.oid AND attname = 'namespace'"
            " AND attnotnull), c.relrowsecurity FROM pg_class c WHERE c.oid = %s::regclass",
            (f"contextfold.{table}",),
        )
        assert has_namespace, table
        if secured:
            # The tenant's policy; others may let maintenance through (the expiry sweep deletes expired entries).
            policies = database.query(
                "SELECT qual FROM pg_policies WHERE schemaname = 'contextfold' AND tablename = %s", (table,)
            )
            assert any(_COMPARED.search(qual or "") for (qual,) in policies), (table, policies)
        keys = database.query(
            "SELECT conname, contype, (SELECT array_agg(attname) FROM pg_attribute WHERE attrelid = conrelid"
            " AND attnum = ANY(conkey)), (SELECT array_agg(attname) FROM pg_attribute WHERE attrelid = confrelid"
            " AND attnum = ANY(confkey)) FROM pg_constraint WHERE conrelid = %s::regclass"
            " AND contype IN ('p', 'u', 'f')",
            (f"contextfold.{table}",),
        )
        assert any(kind == "p" for _, kind, _, _ in keys), f"{table} has no primary key"
        for name, kind, columns, referenced in keys:
            assert "namespace" in columns, (table, name)
            if kind == "f":
                assert "namespace" in referenced, (table, name)
        unique_indexes = database.query(
            "SELECT i.indexrelid::regclass::text, (SELECT array_agg(attname) FROM pg_attribute"
            " WHERE attrelid = i.indrelid AND attnum = ANY(i.indkey)) FROM pg_index i"
            " WHERE i.indrelid = %s::regclass AND i.indisunique",
            (f"contextfold.{table}",),
        )
        for index, columns in unique_indexes:
            assert "namespace" in (columns or []), (table, index)


def test_no_statement_joins_across_namespaces(database: Postgres, logged: list) -> None:
    tables = _tenant_tables(database)
    touching = [(text, parameters) for text, parameters in logged if _reads(text, tables)]
    assert len(touching) > 20
    for text, parameters in touching:
        compared = _COMPARED.findall(text)
        if not compared:
            # Every namespace's rows of one table, joined with nothing: run on every shard as it is.
            assert _reads(text, tables) == 1 and " JOIN " not in text.upper(), text
            continue
        assert len(compared) >= _reads(text, tables) - text.upper().startswith("INSERT"), text
        values = {parameters.get(value[1:], value) if value.startswith("$") else value for value in compared}
        assert len(values) == 1, (values, text)


def test_the_functions_statements_call_stay_in_one_namespace(database: Postgres) -> None:
    tables = _tenant_tables(database)
    functions = database.query(
        "SELECT p.proname, p.prosrc, p.prorettype = 'trigger'::regtype FROM pg_proc p"
        " WHERE p.pronamespace = 'contextfold'::regnamespace"
    )
    reading = [(name, source) for name, source, trigger in functions if _reads(source, tables) and not trigger]
    assert {"nearest_per_store", "word_matches"} <= {name for name, _ in reading}
    for name, source in reading:
        compared = _COMPARED.findall(source)
        assert compared and len(compared) >= _reads(source, tables), name
        # A statement a function composes names its values by position (`EXECUTE … USING`): each such
        # position is the function's namespace in every USING list.
        positions = {int(value[1:]) for value in compared if value.startswith("$")}
        for listed in re.findall(r"\bUSING\s+([^;]*);", source):
            given = [argument.strip() for argument in listed.split(",")]
            assert all(given[position - 1] == "p_namespace" for position in positions), (name, listed)
        assert len({value for value in compared if not value.startswith("$")}) <= 1, (name, compared)


def test_the_page_says_what_sharding_would_change() -> None:
    said = section("Past one primary")
    for table in SERVICE_WIDE:
        assert f"`{table}`" in said
    assert "HNSW" in said and "create_distributed_table" in said
