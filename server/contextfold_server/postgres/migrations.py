"""The database schema, migrated forward at start-up.

Postgres holds everything the service keeps, so any replica can serve any call.

Every replica runs the migrations as it starts; an advisory lock makes them run
once, and each applied version is recorded, so running them again changes
nothing. Tables live in their own schema so contextfold can share a database.
"""

from __future__ import annotations

import secrets

import psycopg
from psycopg import sql

SCHEMA = "contextfold"

# The role requests run as when the login role would bypass row-level security
# (a superuser, or BYPASSRLS): no login, no privileges beyond the tables' rows.
SERVICE_ROLE = "contextfold_service"

# The namespace of an open service (`--auth none`): `~` is no character a key's namespace may hold.
OPEN_NAMESPACE = "~open"

# Every tenant's rows carry its namespace; the session setting names the namespace
# a connection acts for, and row-level security shows and accepts only its rows.
NAMESPACE_SETTING = "contextfold.namespace"
# The tables row-level security guarded from migration 4 on, and those added since.
_FIRST_TENANT_TABLES = ("stores", "memories", "providers")
_TENANT_TABLES = (*_FIRST_TENANT_TABLES, "memory_versions", "remembered_turns")
# A connection setting this (the purge's, never a request's) sees and deletes every namespace's expired
# entries, and nothing else.
PURGE_SETTING = "contextfold.purge"

# The text search configuration of the lexical index: English stemming and stop words.
LEXICAL_CONFIG = "english"
# A word counts for the lexical search when at most one in a hundred of the entries searched hold it, and
# at most this many.
RARE_WORD_ENTRIES = 20
# A store of at most this many entries is searched exactly, from its rows (about a microsecond each);
# a larger one through the vector index. One search reads at most EXACT_SEARCH_ENTRIES exactly, the
# smallest stores first: past that, stores are searched as the larger ones are.
EXACT_STORE_ENTRIES = 1000
EXACT_SEARCH_ENTRIES = 3000

# One advisory-lock key for the migrations (indexes of new dimensions have their own, in vector_index.py),
# so replicas starting together never race.
_DDL_LOCK = 0x636F6E74  # "cont"


def _tenant_isolation(table: str) -> str:
    """Row-level security on a tenant's table: its rows are seen and written by the namespace the
    connection acts for only, whoever the role (forced on the table's owner too)."""
    return f"""
            ALTER TABLE {SCHEMA}.{table} ENABLE ROW LEVEL SECURITY;
            ALTER TABLE {SCHEMA}.{table} FORCE ROW LEVEL SECURITY;
            CREATE POLICY tenant_isolation ON {SCHEMA}.{table}
                USING (namespace = current_setting('{NAMESPACE_SETTING}', true))
                WITH CHECK (namespace = current_setting('{NAMESPACE_SETTING}', true));
            """


def _nearest_per_store(expiring: bool) -> str:
    """`nearest_per_store` as migration 10 created it, or with `expiring` as migration 11 does: then it
    takes the caller's clock (`p_live_at`), returns no entry expired by then, and returns each entry's
    update time, expiry and version besides (`live_entry`). Its EXECUTEs pass the
    time as $10, after fillers where a statement uses fewer parameters."""
    live_parameter = ", p_live_at timestamptz" if expiring else ""
    live_declaration = (
        "\n            p_live constant text := ' AND (m.expire_time IS NULL OR m.expire_time > $10)';"
        if expiring
        else ""
    )
    live_read = "' || p_live || '" if expiring else ""
    # The time after the first eight parameters of a statement that takes eight.
    m = ", NULL::integer, p_live_at" if expiring else ""
    live_static = " AND (m.expire_time IS NULL OR m.expire_time > p_live_at)" if expiring else ""
    live_scoped = ", p_live_at" if expiring else ""
    live_columns = "m.update_time, m.expire_time, m.version, " if expiring else ""
    entry_type, distance_column = ("live_entry", 13) if expiring else ("nearest_entry", 10)
    return f"""CREATE FUNCTION {SCHEMA}.nearest_per_store(
            p_namespace text, p_dimension integer, p_vector vector, p_stores text[], p_per_store integer,
            p_pool integer, p_exclude text[], p_user_id text, p_agent_id text, p_session_id text{live_parameter}
        ) RETURNS SETOF {SCHEMA}.{entry_type}
        LANGUAGE plpgsql STABLE SET plan_cache_mode = force_generic_plan AS $function$
        DECLARE
            p_small text[] := '{{}}';
            p_large boolean := false;
            p_pooled {SCHEMA}.{entry_type}[];
            p_scoped boolean := p_user_id <> '' OR p_agent_id <> '' OR p_session_id <> '';
            p_scope constant text := ' FROM {SCHEMA}.memories m WHERE m.namespace = $2 AND m.dimension = %1$s'
                ' AND NOT (m.id = ANY($4)) AND ($5 = '''' OR m.user_id = $5) AND ($6 = '''' OR m.agent_id = $6)'
                ' AND ($7 = '''' OR m.session_id = $7)';
            p_columns constant text := 'SELECT m.id, m.store, m.content, m.metadata, m.user_id, m.agent_id,'
                ' m.session_id, m.create_time, m.seq, {live_columns}';{live_declaration}
        BEGIN
            IF cardinality(p_stores) = 1 THEN
                -- One store: its own nearest are all there is to read, through the index or exactly, as the
                -- statement's plan for its values decides.
                RETURN QUERY EXECUTE format(
                    p_columns || '((m.embedding::vector(%1$s)) <=> $1)::float8 AS distance' || p_scope
                        || ' AND m.store = ANY($3){live_read} ORDER BY distance LIMIT $8',
                    p_dimension
                ) USING p_vector, p_namespace, p_stores, p_exclude, p_user_id, p_agent_id, p_session_id, p_per_store{m};
                RETURN;
            END IF;
            IF p_scoped THEN
                -- As below, in one statement planned for the scope's values.
                EXECUTE format(
                    'SELECT coalesce(array_agg(sized.name) FILTER (WHERE sized.exact), ''{{}}''),'
                    ' coalesce(bool_or(NOT sized.exact), false) FROM ('
                    ' SELECT counted.name, counted.entries <= {EXACT_STORE_ENTRIES} AND sum(counted.entries)'
                    ' OVER (ORDER BY counted.entries, counted.name) <= {EXACT_SEARCH_ENTRIES} AS exact FROM ('
                    ' SELECT s.name, (SELECT count(*) FROM (SELECT' || p_scope
                    || ' AND m.store = s.name LIMIT {EXACT_STORE_ENTRIES + 1}) AS c) AS entries'
                    ' FROM unnest($3) AS s(name)) AS counted) AS sized',
                    p_dimension
                ) INTO p_small, p_large
                USING p_vector, p_namespace, p_stores, p_exclude, p_user_id, p_agent_id, p_session_id;
            ELSE
                -- Every store counted in one statement (each up to one past the limit, from its index); the
                -- smallest are read exactly while their entries add up to EXACT_SEARCH_ENTRIES at most.
                SELECT coalesce(array_agg(sized.name) FILTER (WHERE sized.exact), '{{}}'),
                    coalesce(bool_or(NOT sized.exact), false)
                INTO p_small, p_large
                FROM (
                    SELECT counted.name, counted.entries <= {EXACT_STORE_ENTRIES}
                        AND sum(counted.entries) OVER (ORDER BY counted.entries, counted.name) <= {EXACT_SEARCH_ENTRIES}
                        AS exact
                    FROM (
                        SELECT s.name, (
                            SELECT count(*) FROM (
                                SELECT FROM {SCHEMA}.memories m WHERE m.namespace = p_namespace AND m.store = s.name
                                LIMIT {EXACT_STORE_ENTRIES + 1}
                            ) AS c
                        ) AS entries
                        FROM unnest(p_stores) AS s(name)
                    ) AS counted
                ) AS sized;
            END IF;
            IF p_large THEN
                -- The pass reads every store searched (a broad filter keeps the vector index quick). It
                -- returns the large stores' entries, and those of a small store it holds p_per_store of
                -- (its nearest, then): the other small stores are read whole below.
                EXECUTE format(
                    'SELECT array_agg(pooled::{SCHEMA}.{entry_type}) FROM (' || p_columns
                        || '((m.embedding::vector(%1$s)) <=> $1)::float8 AS distance' || p_scope
                        || ' AND m.store = ANY($3){live_read} ORDER BY distance LIMIT $8) AS pooled',
                    p_dimension
                ) INTO p_pooled
                USING p_vector, p_namespace, p_stores, p_exclude, p_user_id, p_agent_id, p_session_id, p_pool{m};
                SELECT coalesce(array_agg(s.name), '{{}}') INTO p_small FROM unnest(p_small) AS s(name)
                WHERE (SELECT count(*) FROM unnest(p_pooled) AS x WHERE x.store = s.name) < p_per_store;
                RETURN QUERY SELECT x.* FROM unnest(p_pooled) AS x WHERE NOT (x.store = ANY(p_small));
            END IF;
            IF NOT p_scoped THEN
                RETURN QUERY
                    SELECT nearest.* FROM unnest(p_small) AS s(name)
                    CROSS JOIN LATERAL (
                        SELECT m.id, m.store, m.content, m.metadata, m.user_id, m.agent_id, m.session_id,
                            m.create_time, m.seq, {live_columns}(m.embedding <=> p_vector)::float8 AS distance
                        FROM {SCHEMA}.memories m
                        WHERE m.namespace = p_namespace AND m.store = s.name AND m.dimension = p_dimension
                            AND NOT (m.id = ANY(p_exclude)){live_static}
                        ORDER BY {distance_column} LIMIT p_per_store
                    ) AS nearest;
                RETURN;
            END IF;
            -- Scoped: in one statement planned for the scope's values. Ordered by the distance itself, not
            -- its cast: read exactly, never through the vector index.
            RETURN QUERY EXECUTE format(
                'SELECT nearest.* FROM unnest($8) AS s(name) CROSS JOIN LATERAL ('
                    || p_columns || '(m.embedding <=> $1)::float8 AS distance' || p_scope
                    || ' AND m.store = s.name{live_read} ORDER BY distance LIMIT $9) AS nearest',
                p_dimension
            ) USING p_vector, p_namespace, p_stores, p_exclude, p_user_id, p_agent_id, p_session_id, p_small,
                p_per_store{live_scoped};
        END
        $function$;"""


MIGRATIONS: list[tuple[int, str]] = [
    (
        1,
        f"""
        CREATE TABLE {SCHEMA}.stores (
            namespace   text        NOT NULL,
            name        text        NOT NULL,
            description text        NOT NULL DEFAULT '',
            dimension   integer     NOT NULL CHECK (dimension BETWEEN 1 AND 2000),
            create_time timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (namespace, name)
        );
        CREATE TABLE {SCHEMA}.memories (
            namespace   text        NOT NULL,
            id          text        NOT NULL,
            store       text        NOT NULL,
            seq         bigint      GENERATED ALWAYS AS IDENTITY,
            content     text        NOT NULL,
            metadata    jsonb       NOT NULL DEFAULT '{{}}',
            user_id     text        NOT NULL DEFAULT '',
            agent_id    text        NOT NULL DEFAULT '',
            session_id  text        NOT NULL DEFAULT '',
            dimension   integer     NOT NULL,
            embedding   vector      NOT NULL,
            create_time timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (namespace, id),
            FOREIGN KEY (namespace, store) REFERENCES {SCHEMA}.stores (namespace, name) ON DELETE CASCADE,
            CHECK (vector_dims(embedding) = dimension)
        );
        CREATE INDEX memories_by_store ON {SCHEMA}.memories (namespace, store, seq);
        """,
    ),
    (
        2,
        f"""
        CREATE TABLE {SCHEMA}.providers (
            namespace   text        NOT NULL,
            name        text        NOT NULL,
            target      text        NOT NULL,
            trigger     text        NOT NULL CHECK (trigger IN ('user_turn', 'every_turn')),
            priority    integer     NOT NULL DEFAULT 0,
            timeout_ms  integer     NOT NULL CHECK (timeout_ms BETWEEN 1 AND 30000),
            max_tokens  integer     NOT NULL DEFAULT 0 CHECK (max_tokens >= 0),
            enabled     boolean     NOT NULL DEFAULT true,
            seq         bigint      GENERATED ALWAYS AS IDENTITY,
            create_time timestamptz NOT NULL DEFAULT now(),
            update_time timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (namespace, name)
        );
        """,
    ),
    (
        3,
        f"ALTER TABLE {SCHEMA}.providers ADD COLUMN trigger_expression text NOT NULL DEFAULT ''",
    ),
    (
        4,
        "".join(_tenant_isolation(table) for table in _FIRST_TENANT_TABLES)
        + f"""
        CREATE TABLE {SCHEMA}.api_keys (
            id          text        PRIMARY KEY,
            key_hash    bytea       NOT NULL UNIQUE,
            namespace   text        NOT NULL,
            role        text        NOT NULL CHECK (role IN ('agent', 'admin')),
            description text        NOT NULL DEFAULT '',
            create_time timestamptz NOT NULL DEFAULT now(),
            revoke_time timestamptz
        );
        """,
    ),
    (
        5,
        # A narrow scope (one user's entries among many) is fastest searched exactly, from these;
        # a broad one through the HNSW index. The planner weighs the two with the table's statistics.
        "".join(
            f"CREATE INDEX memories_by_{column} ON {SCHEMA}.memories (namespace, store, {column}) WHERE {column} <> '';"
            for column in ("user_id", "agent_id", "session_id")
        ),
    ),
    (
        6,
        # Keys the service shares between its replicas (page tokens' signing key): read at start-up
        # by the login role, never by requests.
        f"CREATE TABLE {SCHEMA}.service_secrets (name text PRIMARY KEY, value bytea NOT NULL)",
    ),
    (
        7,
        # An open service's calls used to act in `default`, a name a tenant's key may hold; they act in
        # `~open` now, which no key can name. What `default` holds moves there unless a key ever named
        # it (then it is that tenant's). Row-level security is lifted for the move, within it.
        f"""
        DO $$ BEGIN
            IF NOT EXISTS (SELECT FROM {SCHEMA}.api_keys WHERE namespace = 'default') THEN
                ALTER TABLE {SCHEMA}.stores NO FORCE ROW LEVEL SECURITY;
                ALTER TABLE {SCHEMA}.memories NO FORCE ROW LEVEL SECURITY;
                ALTER TABLE {SCHEMA}.providers NO FORCE ROW LEVEL SECURITY;
                INSERT INTO {SCHEMA}.stores (namespace, name, description, dimension, create_time)
                    SELECT '{OPEN_NAMESPACE}', name, description, dimension, create_time
                    FROM {SCHEMA}.stores WHERE namespace = 'default';
                UPDATE {SCHEMA}.memories SET namespace = '{OPEN_NAMESPACE}' WHERE namespace = 'default';
                DELETE FROM {SCHEMA}.stores WHERE namespace = 'default';
                UPDATE {SCHEMA}.providers SET namespace = '{OPEN_NAMESPACE}' WHERE namespace = 'default';
                ALTER TABLE {SCHEMA}.stores FORCE ROW LEVEL SECURITY;
                ALTER TABLE {SCHEMA}.memories FORCE ROW LEVEL SECURITY;
                ALTER TABLE {SCHEMA}.providers FORCE ROW LEVEL SECURITY;
            END IF;
        END $$;
        """,
    ),
    (
        8,
        # A key may be bound to a scope: every call made with it is confined to that user and/or agent.
        f"""
        ALTER TABLE {SCHEMA}.api_keys ADD COLUMN user_id text NOT NULL DEFAULT '';
        ALTER TABLE {SCHEMA}.api_keys ADD COLUMN agent_id text NOT NULL DEFAULT '';
        """,
    ),
    (
        9,
        # How a provider is reached: TLS (its CA, a client certificate, the name to verify) and a
        # header sent with every call. The client key and the header's value are sealed.
        f"""
        ALTER TABLE {SCHEMA}.providers ADD COLUMN tls boolean NOT NULL DEFAULT false;
        ALTER TABLE {SCHEMA}.providers ADD COLUMN tls_ca text NOT NULL DEFAULT '';
        ALTER TABLE {SCHEMA}.providers ADD COLUMN tls_cert text NOT NULL DEFAULT '';
        ALTER TABLE {SCHEMA}.providers ADD COLUMN tls_server_name text NOT NULL DEFAULT '';
        ALTER TABLE {SCHEMA}.providers ADD COLUMN tls_key_sealed bytea;
        ALTER TABLE {SCHEMA}.providers ADD COLUMN credential_header text NOT NULL DEFAULT '';
        ALTER TABLE {SCHEMA}.providers ADD COLUMN credential_sealed bytea;
        """,
    ),
    (
        10,
        # Ranking (memory/ranking.py). `lexemes`: each entry's words for full-text search, kept by
        # Postgres itself, with an inverted index; adding the column rewrites the table once.
        #
        # `nearest_per_store`: the entries nearest to a vector in each of the stores, p_per_store of each
        # where it matters. A store of at most EXACT_STORE_ENTRIES entries (within the scope; a bounded
        # count tells) is small, a larger one large, and so is a small one past EXACT_SEARCH_ENTRIES
        # (counted smallest first). When a large one is searched, one pass reads the
        # p_pool nearest across all the stores through the dimension's vector index: a store with
        # p_per_store of them (the store a query's near-misses come from) has its nearest there and is
        # not read again. Every other small store is read exactly, from its rows; a large one is not
        # (its entries near the query are fewer and farther, and are judged by what the pass holds of
        # them). The counts and the small stores' reads are one statement each: unscoped, planned once
        # per connection; scoped, planned for the scope's values, so a narrow scope is read through its
        # own index. One store alone is read by one statement planned for its values.
        # Only the dimension, an integer, is written into a statement: each dimension's vector index is
        # over its own cast.
        f"""
        ALTER TABLE {SCHEMA}.memories
            ADD COLUMN lexemes tsvector GENERATED ALWAYS AS (to_tsvector('{LEXICAL_CONFIG}', content)) STORED;
        CREATE INDEX memories_lexemes ON {SCHEMA}.memories USING gin (lexemes);
        CREATE TYPE {SCHEMA}.nearest_entry AS (
            id text, store text, content text, metadata jsonb, user_id text, agent_id text,
            session_id text, create_time timestamptz, seq bigint, distance float8
        );
        """
        + _nearest_per_store(expiring=False)
        + f"""
        -- The entries holding the rare words of p_text, each weighed by the words it holds: a word is rare
        -- when at most one in a hundred of the stores' entries hold it (at most RARE_WORD_ENTRIES; the
        -- entries are counted up to RARE_WORD_ENTRIES hundred), and it weighs ln((rare + 1) / holders).
        -- Each word reads at most rare + 1 of its holders from the inverted index.
        --
        -- It runs as its owner: row-level security lets no index serve the match operator (`@@` is not
        -- leakproof), so under it every word would be a scan of the table. It reads the namespace the
        -- connection acts for, as the policy does, and never another; only requests may call it.
        CREATE FUNCTION {SCHEMA}.rare_word_matches(
            p_text text, p_stores text[], p_exclude text[], p_user_id text, p_agent_id text, p_session_id text,
            p_limit integer
        ) RETURNS TABLE (id text, weight float8)
        -- Its rows are joined to their entries: the planner should expect a few (it reads each by its key).
        -- Its statement is planned once per connection, for any words: never to scan the table.
        LANGUAGE plpgsql STABLE ROWS 20 SECURITY DEFINER
        SET search_path = pg_catalog, pg_temp SET plan_cache_mode = force_generic_plan SET enable_seqscan = off
        AS $function$
        DECLARE
            p_namespace text := current_setting('{NAMESPACE_SETTING}', true);
        BEGIN
            RETURN QUERY
                WITH sampled AS MATERIALIZED (
                    SELECT greatest(1, least({RARE_WORD_ENTRIES}, count(*) / 100))::integer AS rare FROM (
                        SELECT FROM {SCHEMA}.memories m
                        WHERE m.namespace = p_namespace AND m.store = ANY(p_stores)
                        LIMIT {100 * RARE_WORD_ENTRIES}
                    ) AS s
                ), held AS MATERIALIZED (
                    SELECT count(*) AS holders, array_agg(h.id) FILTER (WHERE h.usable) AS ids
                    FROM (
                        SELECT DISTINCT plainto_tsquery('simple', t.lexeme) AS word
                        FROM unnest(to_tsvector('{LEXICAL_CONFIG}', p_text)) AS t
                    ) AS w
                    CROSS JOIN LATERAL (
                        SELECT m.id, NOT (m.id = ANY(p_exclude)) AND (p_user_id = '' OR m.user_id = p_user_id)
                            AND (p_agent_id = '' OR m.agent_id = p_agent_id)
                            AND (p_session_id = '' OR m.session_id = p_session_id) AS usable
                        FROM {SCHEMA}.memories m
                        WHERE m.namespace = p_namespace AND m.store = ANY(p_stores) AND m.lexemes @@ w.word
                        LIMIT (SELECT s.rare + 1 FROM sampled s)
                    ) AS h
                    GROUP BY w.word
                )
                SELECT u.id, sum(ln((s.rare + 1.0) / held.holders))::float8
                FROM held CROSS JOIN sampled s CROSS JOIN LATERAL unnest(held.ids) AS u(id)
                WHERE held.holders <= s.rare
                GROUP BY u.id ORDER BY 2 DESC, 1 LIMIT p_limit;
        END
        $function$;
        REVOKE ALL ON FUNCTION {SCHEMA}.rare_word_matches(text, text[], text[], text, text, text, integer)
            FROM PUBLIC;
        """,
    ),
    (
        11,
        # The memory lifecycle. Entries gain an update time (NULL until their first update: no rewrite of
        # the table), an expiry and a version; stores a default time-to-live. `memory_versions` keeps what
        # each update replaced, `remembered_turns` the turns Remember has stored (hashes, no text); both
        # go with their entry or store. Metadata gets an inverted index for containment (`@>`), expiring
        # entries one for the purge, which deletes them across namespaces on a connection that says so.
        # `nearest_per_store` now takes the caller's clock and leaves out what has expired.
        f"""
        ALTER TABLE {SCHEMA}.memories ADD COLUMN update_time timestamptz;
        ALTER TABLE {SCHEMA}.memories ADD COLUMN expire_time timestamptz;
        ALTER TABLE {SCHEMA}.memories ADD COLUMN version bigint NOT NULL DEFAULT 1;
        ALTER TABLE {SCHEMA}.stores ADD COLUMN default_ttl interval CHECK (default_ttl > interval '0');
        CREATE INDEX memories_metadata ON {SCHEMA}.memories USING gin (metadata jsonb_path_ops);
        CREATE INDEX memories_expiring ON {SCHEMA}.memories (expire_time) WHERE expire_time IS NOT NULL;
        CREATE TABLE {SCHEMA}.memory_versions (
            namespace   text        NOT NULL,
            id          text        NOT NULL,
            version     bigint      NOT NULL,
            store       text        NOT NULL,
            content     text        NOT NULL,
            metadata    jsonb       NOT NULL,
            user_id     text        NOT NULL,
            agent_id    text        NOT NULL,
            session_id  text        NOT NULL,
            create_time timestamptz NOT NULL,
            update_time timestamptz,
            expire_time timestamptz,
            replace_time timestamptz NOT NULL DEFAULT now(),
            replaced_by text        NOT NULL DEFAULT '',
            PRIMARY KEY (namespace, id, version),
            FOREIGN KEY (namespace, id) REFERENCES {SCHEMA}.memories (namespace, id) ON DELETE CASCADE
        );
        CREATE TABLE {SCHEMA}.remembered_turns (
            namespace   text        NOT NULL,
            store       text        NOT NULL,
            turn        text        NOT NULL,
            user_id     text        NOT NULL,
            agent_id    text        NOT NULL,
            session_id  text        NOT NULL,
            create_time timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (namespace, store, turn),
            FOREIGN KEY (namespace, store) REFERENCES {SCHEMA}.stores (namespace, name) ON DELETE CASCADE
        );
        """
        + "".join(_tenant_isolation(table) for table in ("memory_versions", "remembered_turns"))
        + f"""
        CREATE POLICY purge_reads ON {SCHEMA}.memories FOR SELECT
            USING (current_setting('{PURGE_SETTING}', true) = 'on' AND expire_time <= now());
        CREATE POLICY purge_deletes ON {SCHEMA}.memories FOR DELETE
            USING (current_setting('{PURGE_SETTING}', true) = 'on' AND expire_time <= now());
        CREATE TYPE {SCHEMA}.live_entry AS (
            id text, store text, content text, metadata jsonb, user_id text, agent_id text,
            session_id text, create_time timestamptz, seq bigint, update_time timestamptz,
            expire_time timestamptz, version bigint, distance float8
        );
        DROP FUNCTION {SCHEMA}.nearest_per_store(
            text, integer, vector, text[], integer, integer, text[], text, text, text
        );
        """
        + _nearest_per_store(expiring=True),
    ),
    (
        12,
        # The ids of the entries whose metadata contains one of the documents, through the metadata's
        # inverted index. It runs as its owner, as rare_word_matches does, and for the same reason: under
        # row-level security Postgres uses no index for `@>` (not leakproof). It reads the namespace the
        # connection acts for, as the policies do, and never another; only requests may call it.
        f"""
        CREATE FUNCTION {SCHEMA}.metadata_holders(p_documents jsonb[]) RETURNS SETOF text
        LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $function$
            SELECT DISTINCT h.id FROM unnest(p_documents) AS d(document)
            CROSS JOIN LATERAL (
                SELECT m.id FROM {SCHEMA}.memories m
                WHERE m.namespace = current_setting('{NAMESPACE_SETTING}', true) AND m.metadata @> d.document
            ) AS h
        $function$;
        REVOKE ALL ON FUNCTION {SCHEMA}.metadata_holders(jsonb[]) FROM PUBLIC;
        """,
    ),
]


async def bypasses_row_security(conn: psycopg.AsyncConnection) -> bool:
    """Whether the login role skips row-level security (a superuser, or BYPASSRLS): then requests
    must run as the service role for the policies to hold."""
    cursor = await conn.execute("SELECT rolsuper OR rolbypassrls FROM pg_roles WHERE rolname = current_user")
    row = await cursor.fetchone()
    return bool(row and row[0])


_REQUEST_GRANTS = f"""
    GRANT USAGE ON SCHEMA {SCHEMA} TO {{grantee}};
    GRANT SELECT, INSERT, UPDATE, DELETE ON {{tables}} TO {{grantee}};
    GRANT USAGE ON ALL SEQUENCES IN SCHEMA {SCHEMA} TO {{grantee}};
    -- The search functions (rare_word_matches runs as the owner: nobody else may call it).
    GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA {SCHEMA} TO {{grantee}};
    -- Keys are checked by the key ring, on the owner's connection: requests never read them.
    REVOKE ALL ON {SCHEMA}.api_keys, {SCHEMA}.service_secrets, {SCHEMA}.migrations FROM {{grantee}};
"""


async def _grant_requests(conn: psycopg.AsyncConnection, grantee: str) -> None:
    """What requests need (the tenants' rows, the sequences), and no more, to the role `grantee`: on the
    tenants' tables the schema has (all of them, once every migration has run)."""
    cursor = await conn.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = %s AND table_name = ANY(%s)",
        (SCHEMA, list(_TENANT_TABLES)),
    )
    tables = sql.SQL(", ").join(sql.Identifier(SCHEMA, name) for (name,) in await cursor.fetchall())
    await conn.execute(sql.SQL(_REQUEST_GRANTS).format(grantee=sql.Identifier(grantee), tables=tables))


async def _create_service_role(conn: psycopg.AsyncConnection) -> None:
    """The role requests run as when the login role would bypass row-level security: it owns nothing."""
    await conn.execute(
        f"""
        DO $$ BEGIN
            IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{SERVICE_ROLE}') THEN
                CREATE ROLE {SERVICE_ROLE} NOLOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE;
            END IF;
        END $$;
        GRANT {SERVICE_ROLE} TO current_user;
        """
    )
    await _grant_requests(conn, SERVICE_ROLE)


async def _serving_role(serving_url: str) -> tuple[str, bool]:
    """The role a URL logs in as, and whether it bypasses row-level security."""
    async with await psycopg.AsyncConnection.connect(serving_url, autocommit=True) as conn:
        cursor = await conn.execute(
            "SELECT current_user, rolsuper OR rolbypassrls FROM pg_roles WHERE rolname = current_user"
        )
        row = await cursor.fetchone()
    assert row is not None
    return row[0], bool(row[1])


async def migrate(conninfo: str, serving_url: str = "") -> None:
    """Migrate the schema as the role of `conninfo` (its owner), and grant requests what they need: to
    the service role when a login role bypasses row-level security, and to the role of `serving_url`
    when requests log in as a role of their own (a migration role apart, for production)."""
    async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn:
        await conn.execute("SELECT pg_advisory_lock(%s)", (_DDL_LOCK,))
        try:
            await conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
            await conn.execute(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
            await conn.execute(
                f"CREATE TABLE IF NOT EXISTS {SCHEMA}.migrations"
                " (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
            )
            cursor = await conn.execute(f"SELECT version FROM {SCHEMA}.migrations")
            applied = {version for (version,) in await cursor.fetchall()}
            for version, statements in MIGRATIONS:
                if version in applied:
                    continue
                async with conn.transaction():
                    await conn.execute(statements)
                    await conn.execute(f"INSERT INTO {SCHEMA}.migrations (version) VALUES (%s)", (version,))
            serving, serving_bypasses = (
                await _serving_role(serving_url) if serving_url and serving_url != conninfo else ("", False)
            )
            if serving_bypasses or await bypasses_row_security(conn):
                await _create_service_role(conn)
            if serving and serving_bypasses:
                await conn.execute(
                    sql.SQL("GRANT {} TO {}").format(sql.Identifier(SERVICE_ROLE), sql.Identifier(serving))
                )
            elif serving:
                await _grant_requests(conn, serving)
        finally:
            await conn.execute("SELECT pg_advisory_unlock(%s)", (_DDL_LOCK,))


async def service_secret(conninfo: str, name: str) -> bytes:
    """The secret `name`, made (32 random bytes) by whichever replica asks first: every replica then
    reads the same one, so what one signs another accepts."""
    async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn:
        await conn.execute(
            f"INSERT INTO {SCHEMA}.service_secrets (name, value) VALUES (%s, %s) ON CONFLICT DO NOTHING",
            (name, secrets.token_bytes(32)),
        )
        cursor = await conn.execute(f"SELECT value FROM {SCHEMA}.service_secrets WHERE name = %s", (name,))
        row = await cursor.fetchone()
    assert row is not None
    return bytes(row[0])
