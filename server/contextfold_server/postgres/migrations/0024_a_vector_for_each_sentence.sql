-- A vector for each sentence of an entry that says several things. An entry's one vector is near none of them: a
-- LoCoMo turn holds 4.2 sentences on average, and ranked by the best of its own vector and its sentences' vectors,
-- the turns hold 0.503 of a question's evidence in their first five, against 0.400 by their own (bench/sentences.py).
-- Each sentence is a row beside its entry (`sentences`), keeping its entry's store and scope so that a scope's rows
-- are read by an index of their own, its vector in half precision: a scope's sentences are read whole by a search,
-- and half the bytes read them in three quarters of the time (the cosine changes by about 0.001). The rows go when their entry goes (deleted, expired, its store deleted), and
-- when its text or vector changes (`sentences_follow_entry`); they are written after the entry, by the bulk
-- workers (memory/sentences.py), in the tenants' turns on the model.
--
-- Whose vector an entry holds decides whether its sentences get vectors (`memories.sentences_state`):
--   NULL  none: the caller gave its vector (another model's, whose space the server's sentences are not in);
--   0     the server's model embedded it: its sentences are to be embedded;
--   1     not known (written before this migration, or imported with its vector): the entry is embedded again,
--         and its sentences are embedded only if its vector is the server's model's;
--   2     done: its sentences' rows are written (none for an entry of one sentence).
-- Entries written before this migration are all 1; a write says which it is from now on.
ALTER TABLE contextfold.memories ADD COLUMN sentences_state smallint DEFAULT 1;
ALTER TABLE contextfold.memories ALTER COLUMN sentences_state DROP DEFAULT;
-- What is left to do, by namespace in the order written: small once the sentences keep up with the writes.
CREATE INDEX memories_sentences_pending ON contextfold.memories (namespace, seq) WHERE sentences_state < 2;

CREATE TABLE contextfold.sentences (
    namespace  text     NOT NULL,
    memory_id  text     NOT NULL,
    position   smallint NOT NULL,
    store      text     NOT NULL,
    user_id    text     NOT NULL,
    agent_id   text     NOT NULL,
    session_id text     NOT NULL,
    dimension  integer  NOT NULL,
    embedding  halfvec  NOT NULL,
    PRIMARY KEY (namespace, memory_id, position),
    FOREIGN KEY (namespace, memory_id) REFERENCES contextfold.memories (namespace, id) ON DELETE CASCADE,
    CHECK (vector_dims(embedding) = dimension)
);
CREATE INDEX sentences_by_store ON contextfold.sentences (namespace, store);
CREATE INDEX sentences_by_user_id ON contextfold.sentences (namespace, store, user_id) WHERE user_id <> '';
CREATE INDEX sentences_by_agent_id ON contextfold.sentences (namespace, store, agent_id) WHERE agent_id <> '';
CREATE INDEX sentences_by_session_id ON contextfold.sentences (namespace, store, session_id) WHERE session_id <> '';

ALTER TABLE contextfold.sentences ENABLE ROW LEVEL SECURITY;
ALTER TABLE contextfold.sentences FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON contextfold.sentences
    USING (namespace = current_setting('contextfold.namespace', true))
    WITH CHECK (namespace = current_setting('contextfold.namespace', true));

-- The bulk workers find the namespaces with sentences left to embed across every namespace, as the purge finds
-- expired entries: this connection's setting lets it see those entries' rows, and nothing else.
CREATE POLICY sentences_pending_reads ON contextfold.memories FOR SELECT
    USING (current_setting('contextfold.sentences_pending', true) = 'on' AND sentences_state < 2);

-- An entry whose text or vector changes loses its sentences' rows, which described the old text. Its writer says
-- whose the new vector is (`sentences_state`); one that does not say (the state as it was) has it checked (1). An
-- entry that moves to another scope takes its sentences' rows along.
CREATE FUNCTION contextfold.sentences_follow_entry() RETURNS trigger
LANGUAGE plpgsql AS $function$
BEGIN
    IF (NEW.content, NEW.embedding) IS DISTINCT FROM (OLD.content, OLD.embedding) THEN
        DELETE FROM contextfold.sentences s WHERE s.namespace = OLD.namespace AND s.memory_id = OLD.id;
        IF NEW.sentences_state IS NOT DISTINCT FROM OLD.sentences_state THEN
            NEW.sentences_state := 1;
        END IF;
    ELSIF (NEW.store, NEW.user_id, NEW.agent_id, NEW.session_id)
        IS DISTINCT FROM (OLD.store, OLD.user_id, OLD.agent_id, OLD.session_id) THEN
        UPDATE contextfold.sentences s
        SET store = NEW.store, user_id = NEW.user_id, agent_id = NEW.agent_id, session_id = NEW.session_id
        WHERE s.namespace = OLD.namespace AND s.memory_id = OLD.id;
    END IF;
    RETURN NEW;
END
$function$;
CREATE TRIGGER sentences_follow_entry BEFORE UPDATE OF content, embedding, store, user_id, agent_id, session_id
    ON contextfold.memories FOR EACH ROW EXECUTE FUNCTION contextfold.sentences_follow_entry();
