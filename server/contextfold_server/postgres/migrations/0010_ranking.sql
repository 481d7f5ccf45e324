-- Ranking (engine/ranking.py). `lexemes`: each entry's words for full-text search, kept by Postgres
-- itself, with an inverted index; adding the column rewrites the table once.
--
-- `nearest_per_store`: the entries nearest to a vector in each of the stores, p_per_store of each where
-- it matters. A store of at most 1,000 entries (within the scope; a bounded count tells) is small, a
-- larger one large, and so is a small one past 3,000 entries in all (counted smallest first). When a
-- large one is searched, one pass reads the p_pool nearest across all the stores through the
-- dimension's vector index: a store with p_per_store of them (the store a query's near-misses come
-- from) has its nearest there and is not read again. Every other small store is read exactly, from its
-- rows; a large one is not. The counts and the small stores' reads are one statement each: unscoped,
-- planned once per connection; scoped, planned for the scope's values, so a narrow scope is read
-- through its own index. One store alone is read by one statement planned for its values. Only the
-- dimension, an integer, is written into a statement: each dimension's vector index is over its own cast.
--
-- `rare_word_matches`: the entries holding the rare words of a text (see its comment).
ALTER TABLE contextfold.memories
    ADD COLUMN lexemes tsvector GENERATED ALWAYS AS (to_tsvector('english', content)) STORED;
CREATE INDEX memories_lexemes ON contextfold.memories USING gin (lexemes);
CREATE TYPE contextfold.nearest_entry AS (
    id text, store text, content text, metadata jsonb, user_id text, agent_id text,
    session_id text, create_time timestamptz, seq bigint, distance float8
);
CREATE FUNCTION contextfold.nearest_per_store(
    p_namespace text, p_dimension integer, p_vector vector, p_stores text[], p_per_store integer,
    p_pool integer, p_exclude text[], p_user_id text, p_agent_id text, p_session_id text
) RETURNS SETOF contextfold.nearest_entry
LANGUAGE plpgsql STABLE SET plan_cache_mode = force_generic_plan AS $function$
DECLARE
    p_small text[] := '{}';
    p_large boolean := false;
    p_pooled contextfold.nearest_entry[];
    p_scoped boolean := p_user_id <> '' OR p_agent_id <> '' OR p_session_id <> '';
    p_scope constant text := ' FROM contextfold.memories m WHERE m.namespace = $2 AND m.dimension = %1$s'
        ' AND NOT (m.id = ANY($4)) AND ($5 = '''' OR m.user_id = $5) AND ($6 = '''' OR m.agent_id = $6)'
        ' AND ($7 = '''' OR m.session_id = $7)';
    p_columns constant text := 'SELECT m.id, m.store, m.content, m.metadata, m.user_id, m.agent_id,'
        ' m.session_id, m.create_time, m.seq, ';
BEGIN
    IF cardinality(p_stores) = 1 THEN
        -- One store: its own nearest are all there is to read, through the index or exactly, as the
        -- statement's plan for its values decides.
        RETURN QUERY EXECUTE format(
            p_columns || '((m.embedding::vector(%1$s)) <=> $1)::float8 AS distance' || p_scope
                || ' AND m.store = ANY($3) ORDER BY distance LIMIT $8',
            p_dimension
        ) USING p_vector, p_namespace, p_stores, p_exclude, p_user_id, p_agent_id, p_session_id, p_per_store;
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
            'SELECT array_agg(pooled::contextfold.nearest_entry) FROM (' || p_columns
                || '((m.embedding::vector(%1$s)) <=> $1)::float8 AS distance' || p_scope
                || ' AND m.store = ANY($3) ORDER BY distance LIMIT $8) AS pooled',
            p_dimension
        ) INTO p_pooled
        USING p_vector, p_namespace, p_stores, p_exclude, p_user_id, p_agent_id, p_session_id, p_pool;
        SELECT coalesce(array_agg(s.name), '{}') INTO p_small FROM unnest(p_small) AS s(name)
        WHERE (SELECT count(*) FROM unnest(p_pooled) AS x WHERE x.store = s.name) < p_per_store;
        RETURN QUERY SELECT x.* FROM unnest(p_pooled) AS x WHERE NOT (x.store = ANY(p_small));
    END IF;
    IF NOT p_scoped THEN
        RETURN QUERY
            SELECT nearest.* FROM unnest(p_small) AS s(name)
            CROSS JOIN LATERAL (
                SELECT m.id, m.store, m.content, m.metadata, m.user_id, m.agent_id, m.session_id,
                    m.create_time, m.seq, (m.embedding <=> p_vector)::float8 AS distance
                FROM contextfold.memories m
                WHERE m.namespace = p_namespace AND m.store = s.name AND m.dimension = p_dimension
                    AND NOT (m.id = ANY(p_exclude))
                ORDER BY 10 LIMIT p_per_store
            ) AS nearest;
        RETURN;
    END IF;
    -- Scoped: in one statement planned for the scope's values. Ordered by the distance itself, not
    -- its cast: read exactly, never through the vector index.
    RETURN QUERY EXECUTE format(
        'SELECT nearest.* FROM unnest($8) AS s(name) CROSS JOIN LATERAL ('
            || p_columns || '(m.embedding <=> $1)::float8 AS distance' || p_scope
            || ' AND m.store = s.name ORDER BY distance LIMIT $9) AS nearest',
        p_dimension
    ) USING p_vector, p_namespace, p_stores, p_exclude, p_user_id, p_agent_id, p_session_id, p_small,
        p_per_store;
END
$function$;
-- The entries holding the rare words of p_text, each weighed by the words it holds: a word is rare
-- when at most one in a hundred of the stores' entries hold it (at most RARE_WORD_ENTRIES; the
-- entries are counted up to RARE_WORD_ENTRIES hundred), and it weighs ln((rare + 1) / holders).
-- Each word reads at most rare + 1 of its holders from the inverted index.
--
-- It runs as its owner: row-level security lets no index serve the match operator (`@@` is not
-- leakproof), so under it every word would be a scan of the table. It reads the namespace the
-- connection acts for, as the policy does, and never another; only requests may call it.
CREATE FUNCTION contextfold.rare_word_matches(
    p_text text, p_stores text[], p_exclude text[], p_user_id text, p_agent_id text, p_session_id text,
    p_limit integer
) RETURNS TABLE (id text, weight float8)
-- Its rows are joined to their entries: the planner should expect a few (it reads each by its key).
-- Its statement is planned once per connection, for any words: never to scan the table.
LANGUAGE plpgsql STABLE ROWS 20 SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET plan_cache_mode = force_generic_plan SET enable_seqscan = off
AS $function$
DECLARE
    p_namespace text := current_setting('contextfold.namespace', true);
BEGIN
    RETURN QUERY
        WITH sampled AS MATERIALIZED (
            SELECT greatest(1, least(20, count(*) / 100))::integer AS rare FROM (
                SELECT FROM contextfold.memories m
                WHERE m.namespace = p_namespace AND m.store = ANY(p_stores)
                LIMIT 2000
            ) AS s
        ), held AS MATERIALIZED (
            SELECT count(*) AS holders, array_agg(h.id) FILTER (WHERE h.usable) AS ids
            FROM (
                SELECT DISTINCT plainto_tsquery('simple', t.lexeme) AS word
                FROM unnest(to_tsvector('english', p_text)) AS t
            ) AS w
            CROSS JOIN LATERAL (
                SELECT m.id, NOT (m.id = ANY(p_exclude)) AND (p_user_id = '' OR m.user_id = p_user_id)
                    AND (p_agent_id = '' OR m.agent_id = p_agent_id)
                    AND (p_session_id = '' OR m.session_id = p_session_id) AS usable
                FROM contextfold.memories m
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
REVOKE ALL ON FUNCTION contextfold.rare_word_matches(text, text[], text[], text, text, text, integer)
    FROM PUBLIC;
