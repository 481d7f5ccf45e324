-- Row-level security on the tenants' tables: a row is seen and written only by the namespace the
-- connection acts for, whoever the role (forced on the tables' owner too). API keys, each mapping a
-- caller to a namespace and a role; only the key's SHA-256 is kept.
ALTER TABLE contextfold.stores ENABLE ROW LEVEL SECURITY;
ALTER TABLE contextfold.stores FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON contextfold.stores
    USING (namespace = current_setting('contextfold.namespace', true))
    WITH CHECK (namespace = current_setting('contextfold.namespace', true));

ALTER TABLE contextfold.memories ENABLE ROW LEVEL SECURITY;
ALTER TABLE contextfold.memories FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON contextfold.memories
    USING (namespace = current_setting('contextfold.namespace', true))
    WITH CHECK (namespace = current_setting('contextfold.namespace', true));

ALTER TABLE contextfold.providers ENABLE ROW LEVEL SECURITY;
ALTER TABLE contextfold.providers FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON contextfold.providers
    USING (namespace = current_setting('contextfold.namespace', true))
    WITH CHECK (namespace = current_setting('contextfold.namespace', true));

CREATE TABLE contextfold.api_keys (
    id          text        PRIMARY KEY,
    key_hash    bytea       NOT NULL UNIQUE,
    namespace   text        NOT NULL,
    role        text        NOT NULL CHECK (role IN ('agent', 'admin')),
    description text        NOT NULL DEFAULT '',
    create_time timestamptz NOT NULL DEFAULT now(),
    revoke_time timestamptz
);
