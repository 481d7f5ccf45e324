-- The ids of the entries whose metadata contains one of the documents, through the metadata's inverted
-- index. It runs as its owner, as rare_word_matches does, and for the same reason: under row-level
-- security Postgres uses no index for `@>` (not leakproof). It reads the namespace the connection acts
-- for, as the policies do, and never another; only requests may call it.
CREATE FUNCTION contextfold.metadata_holders(p_documents jsonb[]) RETURNS SETOF text
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $function$
    SELECT DISTINCT h.id FROM unnest(p_documents) AS d(document)
    CROSS JOIN LATERAL (
        SELECT m.id FROM contextfold.memories m
        WHERE m.namespace = current_setting('contextfold.namespace', true) AND m.metadata @> d.document
    ) AS h
$function$;
REVOKE ALL ON FUNCTION contextfold.metadata_holders(jsonb[]) FROM PUBLIC;
