-- The memory lifecycle. Entries gain an update time (NULL until their first update: no rewrite of the
-- table), an expiry and a version; stores a default time-to-live. `memory_versions` keeps what each
-- update replaced, `remembered_turns` the turns Remember has stored (hashes, no text); both go with
-- their entry or store. Metadata gets an inverted index for containment (`@>`), expiring entries one
-- for the purge, which deletes them across namespaces on a connection that says so.
-- `nearest_per_store` now takes the caller's clock and leaves out what has expired.
ALTER TABLE contextfold.memories ADD COLUMN update_time timestamptz;
ALTER TABLE contextfold.memories ADD COLUMN expire_time timestamptz;
ALTER TABLE contextfold.memories ADD COLUMN version bigint NOT NULL DEFAULT 1;
ALTER TABLE contextfold.stores ADD COLUMN default_ttl interval CHECK (default_ttl > interval '0');
CREATE INDEX memories_metadata ON contextfold.memories USING gin (metadata jsonb_path_ops);
CREATE INDEX memories_expiring ON contextfold.memories (expire_time) WHERE expire_time IS NOT NULL;
CREATE TABLE contextfold.memory_versions (
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
    FOREIGN KEY (namespace, id) REFERENCES contextfold.memories (namespace, id) ON DELETE CASCADE
);
CREATE TABLE contextfold.remembered_turns (
    namespace   text        NOT NULL,
    store       text        NOT NULL,
    turn        text        NOT NULL,
    user_id     text        NOT NULL,
    agent_id    text        NOT NULL,
    session_id  text        NOT NULL,
    create_time timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (namespace, store, turn),
    FOREIGN KEY (namespace, store) REFERENCES contextfold.stores (namespace, name) ON DELETE CASCADE
);

ALTER TABLE contextfold.memory_versions ENABLE ROW LEVEL SECURITY;
ALTER TABLE contextfold.memory_versions FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON contextfold.memory_versions
    USING (namespace = current_setting('contextfold.namespace', true))
    WITH CHECK (namespace = current_setting('contextfold.namespace', true));

ALTER TABLE contextfold.remembered_turns ENABLE ROW LEVEL SECURITY;
ALTER TABLE contextfold.remembered_turns FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON contextfold.remembered_turns
    USING (namespace = current_setting('contextfold.namespace', true))
    WITH CHECK (namespace = current_setting('contextfold.namespace', true));

CREATE POLICY purge_reads ON contextfold.memories FOR SELECT
    USING (current_setting('contextfold.purge', true) = 'on' AND expire_time <= now());
CREATE POLICY purge_deletes ON contextfold.memories FOR DELETE
    USING (current_setting('contextfold.purge', true) = 'on' AND expire_time <= now());
CREATE TYPE contextfold.live_entry AS (
    id text, store text, content text, metadata jsonb, user_id text, agent_id text,
    session_id text, create_time timestamptz, seq bigint, update_time timestamptz,
    expire_time timestamptz, version bigint, distance float8
);
DROP FUNCTION contextfold.nearest_per_store(
    text, integer, vector, text[], integer, integer, text[], text, text, text
);
CREATE FUNCTION contextfold.nearest_per_store(
    p_namespace text, p_dimension integer, p_vector vector, p_stores text[], p_per_store integer,
    p_pool integer, p_exclude text[], p_user_id text, p_agent_id text, p_session_id text, p_live_at timestamptz
) RETURNS SETOF contextfold.live_entry
LANGUAGE plpgsql STABLE SET plan_cache_mode = force_generic_plan AS $function$
DECLARE
    p_small text[] := '{}';
    p_large boolean := false;
    p_pooled contextfold.live_entry[];
    p_scoped boolean := p_user_id <> '' OR p_agent_id <> '' OR p_session_id <> '';
    p_scope constant text := ' FROM contextfold.memories m WHERE m.namespace = $2 AND m.dimension = %1$s'
        ' AND NOT (m.id = ANY($4)) AND ($5 = '''' OR m.user_id = $5) AND ($6 = '''' OR m.agent_id = $6)'
        ' AND ($7 = '''' OR m.session_id = $7)';
    p_columns constant text := 'SELECT m.id, m.store, m.content, m.metadata, m.user_id, m.agent_id,'
        ' m.session_id, m.create_time, m.seq, m.update_time, m.expire_time, m.version, ';
    p_live constant text := ' AND (m.expire_time IS NULL OR m.expire_time > $10)';
BEGIN
    IF cardinality(p_stores) = 1 THEN
        -- One store: its own nearest are all there is to read, through the index or exactly, as the
        -- statement's plan for its values decides.
        RETURN QUERY EXECUTE format(
            p_columns || '((m.embedding::vector(%1$s)) <=> $1)::float8 AS distance' || p_scope
                || ' AND m.store = ANY($3)' || p_live || ' ORDER BY distance LIMIT $8',
            p_dimension
        ) USING p_vector, p_namespace, p_stores, p_exclude, p_user_id, p_agent_id, p_session_id, p_per_store, NULL::integer, p_live_at;
        RETURN;
    END IF;
    IF p_scoped THEN
        -- As below, in one statement planned for the scope's values.
        EXECUTE format(
            'SELECT coalesce(array_agg(sized.name) FILTER (WHERE sized.exact), ''{}''),'
            ' coalesce(bool_or(NOT sized.exact), false) FROM ('
            ' SELECT counted.name, counted.entries <= 1000 AND sum(counted.entries)'
            ' OVER (ORDER BY counted.entries, counted.name) <= 3000 AS exact FROM ('
            ' SELECT s.name, (SELECT count(*) FROM (SELECT' || p_scope
            || ' AND m.store = s.name LIMIT 1001) AS c) AS entries'
            ' FROM unnest($3) AS s(name)) AS counted) AS sized',
            p_dimension
        ) INTO p_small, p_large
        USING p_vector, p_namespace, p_stores, p_exclude, p_user_id, p_agent_id, p_session_id;
    ELSE
        -- Every store counted in one statement (each up to one past the limit, from its index); the
        -- smallest are read exactly while their entries add up to EXACT_SEARCH_ENTRIES at most.
        SELECT coalesce(array_agg(sized.name) FILTER (WHERE sized.exact), '{}'),
            coalesce(bool_or(NOT sized.exact), false)
        INTO p_small, p_large
        FROM (
            SELECT counted.name, counted.entries <= 1000
                AND sum(counted.entries) OVER (ORDER BY counted.entries, counted.name) <= 3000
                AS exact
            FROM (
                SELECT s.name, (
                    SELECT count(*) FROM (
                        SELECT FROM contextfold.memories m WHERE m.namespace = p_namespace AND m.store = s.name
                        LIMIT 1001
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
            'SELECT array_agg(pooled::contextfold.live_entry) FROM (' || p_columns
                || '((m.embedding::vector(%1$s)) <=> $1)::float8 AS distance' || p_scope
                || ' AND m.store = ANY($3)' || p_live || ' ORDER BY distance LIMIT $8) AS pooled',
            p_dimension
        ) INTO p_pooled
        USING p_vector, p_namespace, p_stores, p_exclude, p_user_id, p_agent_id, p_session_id, p_pool, NULL::integer, p_live_at;
        SELECT coalesce(array_agg(s.name), '{}') INTO p_small FROM unnest(p_small) AS s(name)
        WHERE (SELECT count(*) FROM unnest(p_pooled) AS x WHERE x.store = s.name) < p_per_store;
        RETURN QUERY SELECT x.* FROM unnest(p_pooled) AS x WHERE NOT (x.store = ANY(p_small));
    END IF;
    IF NOT p_scoped THEN
        RETURN QUERY
            SELECT nearest.* FROM unnest(p_small) AS s(name)
            CROSS JOIN LATERAL (
                SELECT m.id, m.store, m.content, m.metadata, m.user_id, m.agent_id, m.session_id,
                    m.create_time, m.seq, m.update_time, m.expire_time, m.version, (m.embedding <=> p_vector)::float8 AS distance
                FROM contextfold.memories m
                WHERE m.namespace = p_namespace AND m.store = s.name AND m.dimension = p_dimension
                    AND NOT (m.id = ANY(p_exclude)) AND (m.expire_time IS NULL OR m.expire_time > p_live_at)
                ORDER BY 13 LIMIT p_per_store
            ) AS nearest;
        RETURN;
    END IF;
    -- Scoped: in one statement planned for the scope's values. Ordered by the distance itself, not
    -- its cast: read exactly, never through the vector index.
    RETURN QUERY EXECUTE format(
        'SELECT nearest.* FROM unnest($8) AS s(name) CROSS JOIN LATERAL ('
            || p_columns || '(m.embedding <=> $1)::float8 AS distance' || p_scope
            || ' AND m.store = s.name' || p_live || ' ORDER BY distance LIMIT $9) AS nearest',
        p_dimension
    ) USING p_vector, p_namespace, p_stores, p_exclude, p_user_id, p_agent_id, p_session_id, p_small,
        p_per_store, p_live_at;
END
$function$;
