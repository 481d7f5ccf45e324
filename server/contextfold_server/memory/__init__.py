"""Memory kept in Postgres with pgvector: schema, the embedded server, the store, and search."""
