-- Quotas and usage per tenant. `tenant_quotas` holds what the operator set for a namespace (NULL:
-- the server's default), read by the servers on the owner's connection, never by requests.
-- `tenant_usage` counts each namespace's entries and the bytes they take, in a few rows per
-- namespace (`shard`, one of 64: concurrent writes of one tenant rarely wait on one another), kept by
-- triggers on `memories`, one statement at a time: a write's count lands in its transaction.
CREATE TABLE contextfold.tenant_quotas (
    namespace           text        PRIMARY KEY,
    stores              integer     CHECK (stores >= 0),
    providers           integer     CHECK (providers >= 0),
    entries             bigint      CHECK (entries >= 0),
    stored_bytes        bigint      CHECK (stored_bytes >= 0),
    versions_per_entry  integer     CHECK (versions_per_entry >= 1),
    requests_per_second real        CHECK (requests_per_second > 0),
    writes_per_second   real        CHECK (writes_per_second > 0),
    update_time         timestamptz NOT NULL DEFAULT now()
);
-- What each namespace did (calls by method, texts embedded, tokens injected), as the workers count it and
-- add it here every few seconds: what an operator bills or plans from. Read by the owner only.
CREATE TABLE contextfold.tenant_activity (
    namespace   text    NOT NULL,
    kind        text    NOT NULL,
    count       bigint  NOT NULL DEFAULT 0,
    PRIMARY KEY (namespace, kind)
);
CREATE TABLE contextfold.tenant_usage (
    namespace   text    NOT NULL,
    shard       integer NOT NULL,
    entries     bigint  NOT NULL DEFAULT 0,
    bytes       bigint  NOT NULL DEFAULT 0,
    PRIMARY KEY (namespace, shard)
);
-- Requests read their own namespace's usage; the triggers, as the owner, write every namespace's (the
-- purge deletes across namespaces).
ALTER TABLE contextfold.tenant_usage ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON contextfold.tenant_usage
    USING (namespace = current_setting('contextfold.namespace', true))
    WITH CHECK (namespace = current_setting('contextfold.namespace', true));

CREATE FUNCTION contextfold.entry_bytes(p_content text, p_metadata jsonb, p_dimension integer) RETURNS bigint
LANGUAGE sql IMMUTABLE AS $function$
    SELECT octet_length(p_content) + pg_column_size(p_metadata) + 4 * p_dimension
$function$;

CREATE FUNCTION contextfold.count_usage() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $function$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO contextfold.tenant_usage AS u (namespace, shard, entries, bytes)
        SELECT a.namespace, (random() * 63)::integer, count(*), sum(contextfold.entry_bytes(a.content, a.metadata, a.dimension))
        FROM added a GROUP BY a.namespace
        ON CONFLICT (namespace, shard) DO UPDATE SET entries = u.entries + excluded.entries, bytes = u.bytes + excluded.bytes;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO contextfold.tenant_usage AS u (namespace, shard, entries, bytes)
        SELECT r.namespace, (random() * 63)::integer, -count(*), -sum(contextfold.entry_bytes(r.content, r.metadata, r.dimension))
        FROM removed r GROUP BY r.namespace
        ON CONFLICT (namespace, shard) DO UPDATE SET entries = u.entries + excluded.entries, bytes = u.bytes + excluded.bytes;
    ELSE
        INSERT INTO contextfold.tenant_usage AS u (namespace, shard, entries, bytes)
        SELECT changed.namespace, (random() * 63)::integer, 0, sum(changed.bytes) FROM (
            SELECT a.namespace, contextfold.entry_bytes(a.content, a.metadata, a.dimension) AS bytes FROM added a
            UNION ALL
            SELECT r.namespace, -contextfold.entry_bytes(r.content, r.metadata, r.dimension) FROM removed r
        ) AS changed GROUP BY changed.namespace
        ON CONFLICT (namespace, shard) DO UPDATE SET bytes = u.bytes + excluded.bytes;
    END IF;
    RETURN NULL;
END
$function$;
REVOKE ALL ON FUNCTION contextfold.count_usage() FROM PUBLIC;
CREATE TRIGGER count_added AFTER INSERT ON contextfold.memories
    REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION contextfold.count_usage();
CREATE TRIGGER count_removed AFTER DELETE ON contextfold.memories
    REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION contextfold.count_usage();
CREATE TRIGGER count_changed AFTER UPDATE ON contextfold.memories
    REFERENCING OLD TABLE AS removed NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION contextfold.count_usage();
-- What the namespaces hold already (row-level security lifted for the count, within the migration).
ALTER TABLE contextfold.memories NO FORCE ROW LEVEL SECURITY;
INSERT INTO contextfold.tenant_usage (namespace, shard, entries, bytes)
SELECT namespace, 0, count(*), sum(contextfold.entry_bytes(content, metadata, dimension))
FROM contextfold.memories GROUP BY namespace;
ALTER TABLE contextfold.memories FORCE ROW LEVEL SECURITY;
