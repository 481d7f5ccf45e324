-- The neighbours of a search's candidates (migration 18), read by a function whose plan is made once per
-- connection. The default ranking reads the neighbours of its nearest entries and of its word matches in the
-- statements that find them, which are planned for their values at every question: planning the neighbours'
-- part there took 0.3 ms of each. That part's plan depends on no value (from each entry, one step of the
-- neighbours' index either way), so it is made once (Postgres 18 keeps a SQL function's plans for the session;
-- before it, for the statement calling it, which plans it at each question as it planned the part it
-- replaces). For each of `p_seeds` (entries of `p_namespace` the statement found, each with its place: store,
-- session, author and `seq`): the entries just before and just after it in its store and session, or, in none,
-- in its author's order, that the search could return (none of `p_exclude`, within the scope's fields that are
-- set, live at `p_live_at`), each with `p_read` characters of its content, its distance to `p_vector` and the
-- id it is `beside`. Row-level security applies as to the statement calling it. The seeds come with their
-- places rather than as ids to look up: planned for no values in particular, that lookup read every entry of
-- the namespace to find a list of ids.
CREATE TYPE contextfold.seed AS (id text, store text, session_id text, user_id text, agent_id text, seq bigint);
CREATE FUNCTION contextfold.neighbours_of(
    p_namespace text, p_seeds contextfold.seed[], p_vector vector, p_exclude text[], p_user_id text,
    p_agent_id text, p_session_id text, p_live_at timestamptz, p_read integer
) RETURNS TABLE (
    id text, store text, content text, metadata jsonb, user_id text, agent_id text, session_id text,
    create_time timestamptz, seq bigint, update_time timestamptz, expire_time timestamptz, version bigint,
    distance float8, beside text
)
LANGUAGE sql STABLE SET plan_cache_mode = force_generic_plan AS $function$
    SELECT n.*, c.id FROM unnest(p_seeds) AS c
    CROSS JOIN LATERAL (
        (
            SELECT m.id, m.store, left(m.content, p_read), m.metadata, m.user_id, m.agent_id, m.session_id,
                m.create_time, m.seq, m.update_time, m.expire_time, m.version, (m.embedding <=> p_vector)::float8
            FROM contextfold.memories m
            WHERE m.namespace = p_namespace AND m.store = c.store AND m.session_id = c.session_id
            AND (CASE WHEN m.session_id = '' THEN m.user_id ELSE '' END)
                = (CASE WHEN c.session_id = '' THEN c.user_id ELSE '' END)
            AND (CASE WHEN m.session_id = '' THEN m.agent_id ELSE '' END)
                = (CASE WHEN c.session_id = '' THEN c.agent_id ELSE '' END)
            AND (m.session_id <> '' OR m.user_id <> '' OR m.agent_id <> '')
            AND m.seq < c.seq AND NOT (m.id = ANY(p_exclude))
            AND (p_user_id = '' OR m.user_id = p_user_id) AND (p_agent_id = '' OR m.agent_id = p_agent_id)
            AND (p_session_id = '' OR m.session_id = p_session_id)
            AND (m.expire_time IS NULL OR m.expire_time > p_live_at)
            ORDER BY m.seq DESC LIMIT 1
        ) UNION ALL (
            SELECT m.id, m.store, left(m.content, p_read), m.metadata, m.user_id, m.agent_id, m.session_id,
                m.create_time, m.seq, m.update_time, m.expire_time, m.version, (m.embedding <=> p_vector)::float8
            FROM contextfold.memories m
            WHERE m.namespace = p_namespace AND m.store = c.store AND m.session_id = c.session_id
            AND (CASE WHEN m.session_id = '' THEN m.user_id ELSE '' END)
                = (CASE WHEN c.session_id = '' THEN c.user_id ELSE '' END)
            AND (CASE WHEN m.session_id = '' THEN m.agent_id ELSE '' END)
                = (CASE WHEN c.session_id = '' THEN c.agent_id ELSE '' END)
            AND (m.session_id <> '' OR m.user_id <> '' OR m.agent_id <> '')
            AND m.seq > c.seq AND NOT (m.id = ANY(p_exclude))
            AND (p_user_id = '' OR m.user_id = p_user_id) AND (p_agent_id = '' OR m.agent_id = p_agent_id)
            AND (p_session_id = '' OR m.session_id = p_session_id)
            AND (m.expire_time IS NULL OR m.expire_time > p_live_at)
            ORDER BY m.seq LIMIT 1
        )
    ) AS n
    WHERE c.session_id <> '' OR c.user_id <> '' OR c.agent_id <> ''
$function$;
