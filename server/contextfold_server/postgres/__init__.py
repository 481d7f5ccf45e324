"""Postgres, shared by every room that keeps data: the pool, the schema, the change listener, the embedded server."""
