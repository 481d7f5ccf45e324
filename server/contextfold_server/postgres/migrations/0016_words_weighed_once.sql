-- `word_matches` takes the query's words already weighed: the search statement reads each word's
-- holders and the entries' mean length from up to 1,000 of the caller's entries (row-level security
-- applies there, and no inverted index is needed), and asks this function only for what needs the
-- words' inverted index, which row-level security keeps requests from using (`@@` is not leakproof):
-- the entries holding any of the words that find entries (`p_finding`, each as Postgres keeps it),
-- each with its BM25 score (k1 0.9, b 0.4) over `p_words` weighed by `p_idf`, as a share of what an
-- entry holding every word once would score. When the 1,000 read were a sample of more, a finding
-- word is first counted among all the caller's entries (`p_most`: at most that many holders, or it
-- finds none): the sample's oldest entries can make a common word look rare. Its statement is static
-- and small (the previous function built two large statements per call, and planning them cost more
-- than running them), planned for each call's values: a plan made once, at a session's first call
-- (one naming no word and no store), read every entry of a full namespace to find one word.
-- Bounded work, whatever the store's size.
DROP FUNCTION contextfold.word_matches(text, text[], text[], text, text, text, integer);
CREATE FUNCTION contextfold.word_matches(
    p_finding text[], p_words text[], p_idf float8[], p_mean_length float8, p_most integer, p_stores text[],
    p_exclude text[], p_user_id text, p_agent_id text, p_session_id text, p_limit integer
) RETURNS TABLE (id text, weight float8)
LANGUAGE sql STABLE ROWS 20 SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET plan_cache_mode = force_custom_plan SET enable_seqscan = off
AS $function$
    WITH finding AS MATERIALIZED (
        SELECT plainto_tsquery('simple', f.word) AS query FROM unnest(p_finding) AS f(word)
        WHERE p_most IS NULL OR (
            SELECT count(*) FROM (
                SELECT FROM contextfold.memories m
                WHERE m.namespace = current_setting('contextfold.namespace', true) AND m.store = ANY(p_stores)
                AND m.lexemes @@ plainto_tsquery('simple', f.word)
                AND (p_user_id = '' OR m.user_id = p_user_id) AND (p_agent_id = '' OR m.agent_id = p_agent_id)
                AND (p_session_id = '' OR m.session_id = p_session_id)
                LIMIT p_most + 1
            ) AS held
        ) <= p_most
    ), found AS MATERIALIZED (
        SELECT m.id, m.lexemes FROM contextfold.memories m
        WHERE m.namespace = current_setting('contextfold.namespace', true) AND m.store = ANY(p_stores)
        AND m.lexemes @@ (SELECT string_agg('(' || f.query::text || ')', ' | ')::tsquery FROM finding f)
        AND NOT (m.id = ANY(p_exclude))
        AND (p_user_id = '' OR m.user_id = p_user_id) AND (p_agent_id = '' OR m.agent_id = p_agent_id)
        AND (p_session_id = '' OR m.session_id = p_session_id)
        LIMIT 1000
    )
    SELECT f.id, (sum(w.idf * u.tf * 1.9 / (u.tf + 0.9 * (0.6 + 0.4 * length(f.lexemes) / p_mean_length)))
        / greatest((SELECT sum(x) FROM unnest(p_idf) AS x), 1e-9))::float8
    FROM found f
    CROSS JOIN LATERAL (
        SELECT x.lexeme, coalesce(cardinality(x.positions), 1) AS tf FROM unnest(f.lexemes) AS x
    ) AS u
    JOIN unnest(p_words, p_idf) AS w(word, idf) ON w.word = u.lexeme
    GROUP BY f.id ORDER BY 2 DESC, 1 LIMIT p_limit
$function$;
REVOKE ALL ON FUNCTION contextfold.word_matches(
    text[], text[], float8[], float8, integer, text[], text[], text, text, text, integer
) FROM PUBLIC;
-- A session's neighbours (the entries written just before and after one, by `seq`): one step of this
-- index each, rather than reading every entry of the scope and sorting them. It serves whatever the
-- session's own index served.
CREATE INDEX memories_in_session ON contextfold.memories (namespace, store, session_id, seq) WHERE session_id <> '';
DROP INDEX contextfold.memories_by_session_id;
