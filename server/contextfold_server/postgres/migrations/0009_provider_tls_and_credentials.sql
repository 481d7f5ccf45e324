-- How a provider is reached: TLS (its CA, a client certificate, the name to verify) and a header sent
-- with every call. The client key and the header's value are sealed.
ALTER TABLE contextfold.providers ADD COLUMN tls boolean NOT NULL DEFAULT false;
ALTER TABLE contextfold.providers ADD COLUMN tls_ca text NOT NULL DEFAULT '';
ALTER TABLE contextfold.providers ADD COLUMN tls_cert text NOT NULL DEFAULT '';
ALTER TABLE contextfold.providers ADD COLUMN tls_server_name text NOT NULL DEFAULT '';
ALTER TABLE contextfold.providers ADD COLUMN tls_key_sealed bytea;
ALTER TABLE contextfold.providers ADD COLUMN credential_header text NOT NULL DEFAULT '';
ALTER TABLE contextfold.providers ADD COLUMN credential_sealed bytea;
