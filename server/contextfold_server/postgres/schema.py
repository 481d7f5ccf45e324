"""The names the schema gives and the statements rely on: its own schema, the roles, the settings.

The migrations (`migrations/`, one SQL file each) spell these out as literals, as they were when
each was written; the code that reads and writes the tables uses them from here.
"""

from __future__ import annotations

SCHEMA = "contextfold"

# The role requests run as when the login role would bypass row-level security
# (a superuser, or BYPASSRLS): no login, no privileges beyond the tables' rows.
SERVICE_ROLE = "contextfold_service"

# The namespace of an open service (`--auth none`): `~` is no character a key's namespace may hold.
OPEN_NAMESPACE = "~open"

# Every tenant's rows carry its namespace; the session setting names the namespace
# a connection acts for, and row-level security shows and accepts only its rows.
NAMESPACE_SETTING = "contextfold.namespace"
# A connection setting this (the purge's, never a request's) sees and deletes every namespace's expired
# entries, and nothing else.
PURGE_SETTING = "contextfold.purge"

# The tables that hold tenants' rows, each under row-level security (migrations 4, 11, 14 and 17).
TENANT_TABLES = (
    "stores",
    "memories",
    "providers",
    "memory_versions",
    "sentences",
    "remembered_turns",
    "tenant_usage",
    "provider_outcomes",
)
