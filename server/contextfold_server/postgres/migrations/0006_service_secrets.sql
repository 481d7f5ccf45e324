-- Keys the service shares between its replicas (page tokens' signing key): read at start-up by the
-- owner, never by requests.
CREATE TABLE contextfold.service_secrets (name text PRIMARY KEY, value bytea NOT NULL)
