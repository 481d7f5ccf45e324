-- A narrow scope (one user's entries among many) is fastest searched exactly, from these; a broad one
-- through the HNSW index. The planner weighs the two with the table's statistics.
CREATE INDEX memories_by_user_id ON contextfold.memories (namespace, store, user_id) WHERE user_id <> '';
CREATE INDEX memories_by_agent_id ON contextfold.memories (namespace, store, agent_id) WHERE agent_id <> '';
CREATE INDEX memories_by_session_id ON contextfold.memories (namespace, store, session_id) WHERE session_id <> '';
