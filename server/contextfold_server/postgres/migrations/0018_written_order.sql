-- The entries written just before and just after one stored in no session, among its store's entries in
-- none by the same user and agent (turns stored without a session's id, facts a conversation left one
-- after another): one step of this index each, as `memories_in_session` serves the entries in sessions.
CREATE INDEX memories_in_order ON contextfold.memories (namespace, store, user_id, agent_id, seq) WHERE session_id = '';
