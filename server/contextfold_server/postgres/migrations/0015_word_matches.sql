-- `word_matches`: the entries that share the words of a text, each with its BM25 score (k1 0.9,
-- b 0.4) as a share of what an entry holding every word once would score: 1 is every word, rare
-- ones weighing more. Judged among the entries the caller may see (the namespace the connection
-- acts for, the stores, the scope): up to 1,000 of them read, giving their mean length in words
-- and, when they are all there are, each word's holders; past that, the entries are counted (up
-- to 2,000), a word 10 of those read hold is scaled to the count, and a rarer one counted (up to
-- 1,000). A word's inverse document frequency is ln(1 + (n - holders + 0.5) / (holders + 0.5)).
-- Bounded work, whatever the store's size. An entry is found through the words that tell
-- entries apart (held by at most a tenth of them, and at most 200): one holding only words most
-- entries hold is not a match, though such words add to the score of one that is. Words are the
-- entries' `lexemes` (English stemming), names and numbers kept whole.
CREATE FUNCTION contextfold.word_matches(
    p_text text, p_stores text[], p_exclude text[], p_user_id text, p_agent_id text, p_session_id text,
    p_limit integer
) RETURNS TABLE (id text, weight float8)
LANGUAGE plpgsql STABLE ROWS 20 SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET plan_cache_mode = force_generic_plan SET enable_seqscan = off
AS $function$
DECLARE
    p_namespace text := current_setting('contextfold.namespace', true);
    p_scope text := '';
    p_words text[];
    p_idf float8[];
    p_telling text[];
    p_query tsquery;
    p_word text;
    p_mean_length float8;
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
    -- Each word's weight, and the words that find entries (as one query for the inverted index).
    EXECUTE format(
        'WITH words AS MATERIALIZED ('
        '    SELECT DISTINCT t.lexeme AS word FROM unnest(to_tsvector(''english'', $7)) AS t'
        '), sample AS MATERIALIZED ('
        '    SELECT m.lexemes FROM contextfold.memories m WHERE m.namespace = $1 AND m.store = ANY($2)%1$s LIMIT 1000'
        '), sampled AS MATERIALIZED ('
        '    SELECT count(*) AS size, coalesce(avg(length(s.lexemes)), 1)::float8 AS mean_length FROM sample s'
        '), counted AS MATERIALIZED ('
        '    SELECT CASE WHEN z.size < 1000 THEN z.size ELSE ('
        '        SELECT count(*) FROM ('
        '            SELECT FROM contextfold.memories m WHERE m.namespace = $1 AND m.store = ANY($2)%1$s LIMIT 2000'
        '        ) AS s'
        '    ) END AS n FROM sampled z'
        '), weighed AS MATERIALIZED ('
        '    SELECT w.word, h.holders, c.n,'
        '        ln(1 + greatest(0, c.n - h.holders + 0.5) / (h.holders + 0.5))::float8 AS idf'
        '    FROM words w CROSS JOIN counted c CROSS JOIN sampled z'
        '    CROSS JOIN LATERAL (SELECT count(*) AS held FROM sample s'
        '        WHERE s.lexemes @@ plainto_tsquery(''simple'', w.word)) AS k'
        '    CROSS JOIN LATERAL ('
        '        SELECT CASE WHEN z.size < 1000 THEN k.held WHEN k.held >= 10 THEN k.held * c.n / z.size ELSE ('
        '            SELECT count(*) FROM ('
        '                SELECT FROM contextfold.memories m WHERE m.namespace = $1 AND m.store = ANY($2)'
        '                AND m.lexemes @@ plainto_tsquery(''simple'', w.word)%1$s LIMIT 1000'
        '            ) AS held'
        '        ) END AS holders'
        '    ) AS h'
        ')'
        ' SELECT array_agg(w.word), array_agg(w.idf), (SELECT mean_length FROM sampled),'
        '     array_agg(w.word) FILTER (WHERE w.holders BETWEEN 1 AND greatest(5, least(200, w.n / 10)))'
        ' FROM weighed w',
        p_scope
    ) INTO p_words, p_idf, p_mean_length, p_telling
    USING p_namespace, p_stores, p_exclude, p_user_id, p_agent_id, p_session_id, p_text;
    IF p_telling IS NULL THEN
        RETURN;
    END IF;
    -- Any of the telling words, as one query for the inverted index (each word as Postgres keeps it).
    FOREACH p_word IN ARRAY p_telling LOOP
        p_query := CASE WHEN p_query IS NULL THEN plainto_tsquery('simple', p_word)
            ELSE p_query || plainto_tsquery('simple', p_word) END;
    END LOOP;
    RETURN QUERY EXECUTE format(
        'WITH weighed AS (SELECT * FROM unnest($8::text[], $9::float8[]) AS w(word, idf)), found AS MATERIALIZED ('
        '    SELECT m.id, m.lexemes FROM contextfold.memories m'
        '    WHERE m.namespace = $1 AND m.store = ANY($2) AND m.lexemes @@ $10'
        '    AND NOT (m.id = ANY($3))%1$s'
        ')'
        ' SELECT f.id, (sum(w.idf * u.tf * 1.9 / (u.tf + 0.9 * (0.6 + 0.4 * length(f.lexemes) / $11)))'
        '     / (SELECT greatest(sum(idf), 1e-9) FROM weighed))::float8'
        ' FROM found f'
        ' CROSS JOIN LATERAL (SELECT x.lexeme, coalesce(cardinality(x.positions), 1) AS tf FROM unnest(f.lexemes) AS x) AS u'
        ' JOIN weighed w ON w.word = u.lexeme'
        ' GROUP BY f.id ORDER BY 2 DESC, 1 LIMIT $7',
        p_scope
    ) USING p_namespace, p_stores, p_exclude, p_user_id, p_agent_id, p_session_id, p_limit,
        p_words, p_idf, p_query, p_mean_length;
END
$function$;
REVOKE ALL ON FUNCTION contextfold.word_matches(text, text[], text[], text, text, text, integer) FROM PUBLIC;
-- Every search with words now looks them up: the words' inverted index takes each entry as it is
-- written, rather than keeping a list of pending ones (GIN's fast update) that every lookup reads
-- until a vacuum merges it (on 10,000 entries just added, 4 times the words' time).
ALTER INDEX contextfold.memories_lexemes SET (fastupdate = off);
SELECT gin_clean_pending_list('contextfold.memories_lexemes'::regclass);
