"""Who may do what in the database: the schema's owner migrates; requests get the tenants' rows, no more.

When the role requests log in as would bypass row-level security (a superuser, as with the embedded
Postgres, or BYPASSRLS), requests act as the service role (`SERVICE_ROLE`), which owns nothing and
has no privilege beyond the tenants' rows. A production setup logs requests in as a role of its own
(`--database-migration-url` for the owner): that role is granted the same.
"""

from __future__ import annotations

import psycopg
from psycopg import sql

from .schema import SCHEMA, SERVICE_ROLE, TENANT_TABLES

_REQUEST_GRANTS = f"""
    GRANT USAGE ON SCHEMA {SCHEMA} TO {{grantee}};
    GRANT SELECT, INSERT, UPDATE, DELETE ON {{tables}} TO {{grantee}};
    GRANT USAGE ON ALL SEQUENCES IN SCHEMA {SCHEMA} TO {{grantee}};
    -- The search functions (rare_word_matches runs as the owner: nobody else may call it).
    GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA {SCHEMA} TO {{grantee}};
    -- Keys are checked by the key ring, on the owner's connection: requests never read them.
    REVOKE ALL ON {{owners}} FROM {{grantee}};
"""
# What only the schema's owner reads: API keys, the service's secrets, the migrations applied, quotas.
_OWNER_TABLES = ("api_keys", "service_secrets", "migrations", "tenant_quotas", "tenant_activity")


async def bypasses_row_security(conn: psycopg.AsyncConnection) -> bool:
    """Whether the login role skips row-level security (a superuser, or BYPASSRLS): then requests
    must run as the service role for the policies to hold."""
    cursor = await conn.execute("SELECT rolsuper OR rolbypassrls FROM pg_roles WHERE rolname = current_user")
    row = await cursor.fetchone()
    return bool(row and row[0])


async def grant_requests(owner: psycopg.AsyncConnection, serving_url: str) -> None:
    """What requests need, on the owner's connection `owner`: to the service role when a login role
    bypasses row-level security, and to the role of `serving_url` when requests log in as a role of
    their own."""
    serving, serving_bypasses = await _serving_role(serving_url) if serving_url else ("", False)
    if serving_bypasses or await bypasses_row_security(owner):
        await _create_service_role(owner)
    if serving and serving_bypasses:
        await owner.execute(sql.SQL("GRANT {} TO {}").format(sql.Identifier(SERVICE_ROLE), sql.Identifier(serving)))
    elif serving:
        await _grant(owner, serving)


async def _grant(conn: psycopg.AsyncConnection, grantee: str) -> None:
    """The tenants' rows and the sequences, and no more, to the role `grantee`: on the tables the schema
    has (all of them, once every migration has run)."""
    cursor = await conn.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = %s AND table_name = ANY(%s)",
        (SCHEMA, [*TENANT_TABLES, *_OWNER_TABLES]),
    )
    present = {name for (name,) in await cursor.fetchall()}

    def tables(names: tuple[str, ...]) -> sql.Composable:
        return sql.SQL(", ").join(sql.Identifier(SCHEMA, name) for name in names if name in present)

    await conn.execute(
        sql.SQL(_REQUEST_GRANTS).format(
            grantee=sql.Identifier(grantee), tables=tables(TENANT_TABLES), owners=tables(_OWNER_TABLES)
        )
    )


async def _create_service_role(conn: psycopg.AsyncConnection) -> None:
    """The role requests run as when the login role would bypass row-level security: it owns nothing."""
    await conn.execute(
        f"""
        DO $$ BEGIN
            IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{SERVICE_ROLE}') THEN
                CREATE ROLE {SERVICE_ROLE} NOLOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE;
            END IF;
        END $$;
        GRANT {SERVICE_ROLE} TO current_user;
        """
    )
    await _grant(conn, SERVICE_ROLE)


async def _serving_role(serving_url: str) -> tuple[str, bool]:
    """The role a URL logs in as, and whether it bypasses row-level security."""
    async with await psycopg.AsyncConnection.connect(serving_url, autocommit=True) as conn:
        cursor = await conn.execute(
            "SELECT current_user, rolsuper OR rolbypassrls FROM pg_roles WHERE rolname = current_user"
        )
        row = await cursor.fetchone()
    assert row is not None
    return row[0], bool(row[1])
