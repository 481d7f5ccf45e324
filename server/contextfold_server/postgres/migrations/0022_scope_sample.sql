-- The entries of a scope the default's words statement weighs the question's words among (up to `p_most` of
-- them, their `lexemes`), read by a function planned for each call's values. The statement around it keeps one
-- plan per connection, made for no values in particular (planning it took 0.4 ms of each question); inside it,
-- the sample planned for no scope in particular read the store's entries and filtered out the scope's (2,760
-- entries read for a conversation's 419), where planned for the call's scope it reads the scope's own index.
-- Row-level security applies as to the statement calling it. An empty scope field matches every entry.
CREATE FUNCTION contextfold.scope_sample(
    p_namespace text, p_stores text[], p_user_id text, p_agent_id text, p_session_id text, p_most integer
) RETURNS TABLE (lexemes tsvector)
LANGUAGE sql STABLE ROWS 1000 SET plan_cache_mode = force_custom_plan AS $function$
    SELECT m.lexemes FROM contextfold.memories m
    WHERE m.namespace = p_namespace AND m.store = ANY(p_stores)
    AND (p_user_id = '' OR m.user_id = p_user_id) AND (p_agent_id = '' OR m.agent_id = p_agent_id)
    AND (p_session_id = '' OR m.session_id = p_session_id)
    LIMIT p_most
$function$;
