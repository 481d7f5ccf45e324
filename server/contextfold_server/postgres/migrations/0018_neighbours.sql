-- An entry's neighbours, the entries written just before and just after it: in its session (`session_id`), or,
-- for an entry in none, among its store's entries in none by the same user and agent (turns stored without a
-- session's id, facts a conversation left one after another). One index serves both, one step of it each: a
-- session's entries share its key whoever wrote them, and an entry in none is keyed by its author too; an entry
-- in no session and of no author (an import's) has no neighbours and is not in it. It takes over from
-- `memories_in_session` (migration 16), which served the entries in sessions alone.
CREATE INDEX memories_beside ON contextfold.memories (
    namespace, store, session_id,
    (CASE WHEN session_id = '' THEN user_id ELSE '' END),
    (CASE WHEN session_id = '' THEN agent_id ELSE '' END),
    seq
) WHERE session_id <> '' OR user_id <> '' OR agent_id <> '';
DROP INDEX contextfold.memories_in_session;
