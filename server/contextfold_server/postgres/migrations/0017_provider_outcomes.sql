-- What Inject's calls to each provider came to: one row per outcome (`injected`, or the reason it was
-- left out, such as `timeout`), counted by the workers and added here every few seconds, with the
-- latest one's time and detail. Gone with the registration. Requests read their own namespace's rows
-- (GetProvider and ListProviders return them); the workers add them on the owner's connection.
CREATE TABLE contextfold.provider_outcomes (
    namespace   text        NOT NULL,
    provider    text        NOT NULL,
    outcome     text        NOT NULL,
    count       bigint      NOT NULL DEFAULT 0,
    last_time   timestamptz NOT NULL,
    last_detail text        NOT NULL DEFAULT '',
    PRIMARY KEY (namespace, provider, outcome),
    FOREIGN KEY (namespace, provider) REFERENCES contextfold.providers (namespace, name) ON DELETE CASCADE
);
ALTER TABLE contextfold.provider_outcomes ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON contextfold.provider_outcomes
    USING (namespace = current_setting('contextfold.namespace', true))
    WITH CHECK (namespace = current_setting('contextfold.namespace', true));
