-- An open service's calls used to act in `default`, a name a tenant's key may hold; they act in `~open`
-- now, which no key can name. What `default` holds moves there unless a key ever named it (then it is
-- that tenant's). Row-level security is lifted for the move, within it.
DO $$ BEGIN
    IF NOT EXISTS (SELECT FROM contextfold.api_keys WHERE namespace = 'default') THEN
        ALTER TABLE contextfold.stores NO FORCE ROW LEVEL SECURITY;
        ALTER TABLE contextfold.memories NO FORCE ROW LEVEL SECURITY;
        ALTER TABLE contextfold.providers NO FORCE ROW LEVEL SECURITY;
        INSERT INTO contextfold.stores (namespace, name, description, dimension, create_time)
            SELECT '~open', name, description, dimension, create_time
            FROM contextfold.stores WHERE namespace = 'default';
        UPDATE contextfold.memories SET namespace = '~open' WHERE namespace = 'default';
        DELETE FROM contextfold.stores WHERE namespace = 'default';
        UPDATE contextfold.providers SET namespace = '~open' WHERE namespace = 'default';
        ALTER TABLE contextfold.stores FORCE ROW LEVEL SECURITY;
        ALTER TABLE contextfold.memories FORCE ROW LEVEL SECURITY;
        ALTER TABLE contextfold.providers FORCE ROW LEVEL SECURITY;
    END IF;
END $$;
