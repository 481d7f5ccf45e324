-- A lookup in the inverted indexes computes an entry's marked keys only for the entries that hold what it looks
-- for. Each lookup names the index's keys (`own_words`, `own_metadata`: migration 23) so that the words' or the
-- metadata's index can serve it; where the planner reads the namespace's entries through a btree index instead (a
-- store of a few hundred entries, beside another tenant's 50,000: the btree's rows are few by the statistics),
-- every entry read had its keys computed as the filter, 12 us an entry (the namespace's MD5 and an array built for
-- each), and `word_matches` took 8.3 ms for a word none of 200 entries held (the default's search 12 ms, where it
-- was 5 ms before the other tenant wrote). Each lookup now says the same without the mark as well (the entry's
-- words hold the word; its metadata holds the document), which is equivalent among the namespace's own entries and
-- costs a comparison: Postgres checks the cheaper condition first, so an entry that does not hold the word is
-- passed over before its keys are computed (0.7 ms for that word). Which index serves the lookup is unchanged.

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
                AND tsvector_to_array(m.lexemes) @> ARRAY[f.word]
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
        AND tsvector_to_array(m.lexemes) && ARRAY(SELECT f.word FROM finding f)
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
        '            @> contextfold.own_words($1, ARRAY[w.word])'
        '        AND tsvector_to_array(m.lexemes) @> ARRAY[w.word]%1$s'
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

CREATE OR REPLACE FUNCTION contextfold.metadata_holders(p_documents jsonb[]) RETURNS SETOF text
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $function$
    SELECT DISTINCT h.id FROM unnest(p_documents) AS d(document)
    CROSS JOIN LATERAL (
        SELECT m.id FROM contextfold.memories m
        WHERE m.namespace = current_setting('contextfold.namespace', true)
        AND contextfold.own_metadata(m.namespace, m.metadata)
            @> contextfold.own_metadata(current_setting('contextfold.namespace', true), d.document)
        AND m.metadata @> d.document
    ) AS h
$function$;
