-- The inverted indexes keep each namespace's entries apart. `memories_lexemes` (migration 10) held one list of
-- entries for each word, every namespace's entries in it: a tenant's search for a word its few entries hold read
-- the whole list, another tenant's holders with it (5,523 entries for 263 of its own, docs/deploy.md), and only
-- then kept its own. Each entry's words are now indexed with its namespace's mark (`own_words`: the namespace's
-- `namespace_mark`, a space, the word as `lexemes` holds it), so a word's list holds one namespace's
-- entries (two namespaces whose marks agree share their lists, and each still reads only its own rows). The
-- searches that look words up ask the index with the same keys: `word_matches` and `rare_word_matches`, which run
-- as the schema's owner (row-level security lets no index serve `&&` or `@>`, which are not leakproof, any more
-- than `@@`) and read the namespace the connection acts for, never another. A word is matched as `lexemes` holds
-- it, whole.
-- A namespace's mark in the keys of both inverted indexes: the first 8 hex digits of its name's MD5.
CREATE FUNCTION contextfold.namespace_mark(p_namespace text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN left(md5(p_namespace), 8);
CREATE FUNCTION contextfold.own_words(p_namespace text, p_words text[]) RETURNS text[]
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN ARRAY(SELECT contextfold.namespace_mark(p_namespace) || ' ' || w FROM unnest(p_words) AS w);
CREATE INDEX memories_own_words ON contextfold.memories
    USING gin (contextfold.own_words(namespace, tsvector_to_array(lexemes))) WITH (fastupdate = off);
DROP INDEX contextfold.memories_lexemes;

CREATE OR REPLACE FUNCTION contextfold.word_matches(
    p_finding text[], p_words text[], p_idf float8[], p_mean_length float8, p_most integer, p_stores text[],
    p_exclude text[], p_user_id text, p_agent_id text, p_session_id text, p_limit integer
) RETURNS TABLE (id text, weight float8)
LANGUAGE sql STABLE ROWS 20 SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET plan_cache_mode = force_custom_plan SET enable_seqscan = off
AS $function$
    WITH finding AS MATERIALIZED (
        SELECT f.word FROM unnest(p_finding) AS f(word)
        WHERE p_most IS NULL OR (
            SELECT count(*) FROM (
                SELECT FROM contextfold.memories m
                WHERE m.namespace = current_setting('contextfold.namespace', true) AND m.store = ANY(p_stores)
                AND contextfold.own_words(m.namespace, tsvector_to_array(m.lexemes))
                    @> contextfold.own_words(current_setting('contextfold.namespace', true), ARRAY[f.word])
                AND (p_user_id = '' OR m.user_id = p_user_id) AND (p_agent_id = '' OR m.agent_id = p_agent_id)
                AND (p_session_id = '' OR m.session_id = p_session_id)
                LIMIT p_most + 1
            ) AS held
        ) <= p_most
    ), found AS MATERIALIZED (
        SELECT m.id, m.lexemes FROM contextfold.memories m
        WHERE m.namespace = current_setting('contextfold.namespace', true) AND m.store = ANY(p_stores)
        AND contextfold.own_words(m.namespace, tsvector_to_array(m.lexemes))
            && contextfold.own_words(current_setting('contextfold.namespace', true), ARRAY(SELECT f.word FROM finding f))
        AND NOT (m.id = ANY(p_exclude))
        AND (p_user_id = '' OR m.user_id = p_user_id) AND (p_agent_id = '' OR m.agent_id = p_agent_id)
        AND (p_session_id = '' OR m.session_id = p_session_id)
        LIMIT 1000
    )
    SELECT f.id, (sum(w.idf * u.tf * 1.9 / (u.tf + 0.9 * (0.6 + 0.4 * length(f.lexemes) / p_mean_length)))
        / greatest((SELECT sum(x) FROM unnest(p_idf) AS x), 1e-9))::float8
    FROM found f
    CROSS JOIN LATERAL (
        SELECT x.lexeme, coalesce(cardinality(x.positions), 1) AS tf
        FROM unnest(ts_filter(setweight(f.lexemes, 'A', p_words), '{a}')) AS x
    ) AS u
    JOIN unnest(p_words, p_idf) AS w(word, idf) ON w.word = u.lexeme
    GROUP BY f.id ORDER BY 2 DESC, 1 LIMIT p_limit
$function$;

CREATE OR REPLACE FUNCTION contextfold.rare_word_matches(
    p_text text, p_stores text[], p_exclude text[], p_user_id text, p_agent_id text, p_session_id text,
    p_limit integer
) RETURNS TABLE (id text, weight float8)
LANGUAGE plpgsql STABLE ROWS 20 SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET plan_cache_mode = force_generic_plan SET enable_seqscan = off
AS $function$
DECLARE
    p_namespace text := current_setting('contextfold.namespace', true);
    p_scope text := '';
BEGIN
    IF p_user_id <> '' THEN
        p_scope := p_scope || ' AND m.user_id = $4';
    END IF;
    IF p_agent_id <> '' THEN
        p_scope := p_scope || ' AND m.agent_id = $5';
    END IF;
    IF p_session_id <> '' THEN
        p_scope := p_scope || ' AND m.session_id = $6';
    END IF;
    RETURN QUERY EXECUTE format(
        'WITH sampled AS MATERIALIZED ('
        '    SELECT greatest(1, least(20, count(*) / 100))::integer AS rare FROM ('
        '        SELECT FROM contextfold.memories m'
        '        WHERE m.namespace = $1 AND m.store = ANY($2)%1$s'
        '        LIMIT 2000'
        '    ) AS s'
        '), held AS MATERIALIZED ('
        '    SELECT count(*) AS holders, array_agg(h.id) FILTER (WHERE h.usable) AS ids'
        '    FROM (SELECT DISTINCT t.lexeme AS word FROM unnest(to_tsvector(''english'', $7)) AS t) AS w'
        '    CROSS JOIN LATERAL ('
        '        SELECT m.id, NOT (m.id = ANY($3)) AS usable'
        '        FROM contextfold.memories m'
        '        WHERE m.namespace = $1 AND m.store = ANY($2)'
        '        AND contextfold.own_words(m.namespace, tsvector_to_array(m.lexemes))'
        '            @> contextfold.own_words($1, ARRAY[w.word])%1$s'
        '        LIMIT (SELECT s.rare + 1 FROM sampled s)'
        '    ) AS h'
        '    GROUP BY w.word'
        ')'
        ' SELECT u.id, sum(ln((s.rare + 1.0) / held.holders))::float8'
        ' FROM held CROSS JOIN sampled s CROSS JOIN LATERAL unnest(held.ids) AS u(id)'
        ' WHERE held.holders <= s.rare'
        ' GROUP BY u.id ORDER BY 2 DESC, 1 LIMIT $8',
        p_scope
    ) USING p_namespace, p_stores, p_exclude, p_user_id, p_agent_id, p_session_id, p_text, p_limit;
END
$function$;

-- The metadata's inverted index likewise (migration 11: `jsonb_path_ops`, a key for each path and value it holds, by
-- their hash): each entry's metadata is indexed under its namespace's mark (`own_metadata`: `{"<mark>": metadata}`),
-- so the key of a path and value is the namespace's own, and `metadata_holders` asks with each document under the
-- same mark (a document holds in the metadata exactly when it holds under the mark in the metadata under it).
CREATE FUNCTION contextfold.own_metadata(p_namespace text, p_metadata jsonb) RETURNS jsonb
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN jsonb_set('{}', ARRAY[contextfold.namespace_mark(p_namespace)], p_metadata);
CREATE INDEX memories_own_metadata ON contextfold.memories
    USING gin (contextfold.own_metadata(namespace, metadata) jsonb_path_ops);
DROP INDEX contextfold.memories_metadata;
CREATE OR REPLACE FUNCTION contextfold.metadata_holders(p_documents jsonb[]) RETURNS SETOF text
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $function$
    SELECT DISTINCT h.id FROM unnest(p_documents) AS d(document)
    CROSS JOIN LATERAL (
        SELECT m.id FROM contextfold.memories m
        WHERE m.namespace = current_setting('contextfold.namespace', true)
        AND contextfold.own_metadata(m.namespace, m.metadata)
            @> contextfold.own_metadata(current_setting('contextfold.namespace', true), d.document)
    ) AS h
$function$;
