-- `rare_word_matches` judges a word's rarity among the entries the caller may see: a scoped search
-- counts the holders within its scope only, so whether other users' entries hold a word changes
-- nothing it is told. A scoped call's statement is planned for its scope's values (its conditions
-- name only the fields set), so the scope's own index narrows the holders the inverted index finds.
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
        '    FROM ('
        '        SELECT DISTINCT plainto_tsquery(''simple'', t.lexeme) AS word'
        '        FROM unnest(to_tsvector(''english'', $7)) AS t'
        '    ) AS w'
        '    CROSS JOIN LATERAL ('
        '        SELECT m.id, NOT (m.id = ANY($3)) AS usable'
        '        FROM contextfold.memories m'
        '        WHERE m.namespace = $1 AND m.store = ANY($2) AND m.lexemes @@ w.word%1$s'
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
