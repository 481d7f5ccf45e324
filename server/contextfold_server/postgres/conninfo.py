"""What a database URL says, read without connecting: whether libpq can read it, and where it points
(for the operator's logs, never with its password)."""

from __future__ import annotations

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

# What a log line says of a connection string: where it points and as whom, never a secret.
_SHOWN = ("host", "hostaddr", "port", "dbname", "user", "target_session_attrs")


# The values libpq takes for the settings a URL most often gets wrong by hand.
_CHOICES = {
    "sslmode": ("disable", "allow", "prefer", "require", "verify-ca", "verify-full"),
    "target_session_attrs": ("any", "read-write", "read-only", "primary", "standby", "prefer-standby"),
}


def url_problem(url: str) -> str | None:
    """Why libpq cannot use `url` (a URL or `key=value` pairs), None when it can: its syntax, its ports
    (each a number from 1 to 65535; several hosts may have several) and the settings of `_CHOICES`."""
    try:
        parts = conninfo_to_dict(url)
    except psycopg.ProgrammingError as error:
        return str(error).strip()
    for port in str(parts.get("port") or "").split(","):
        if port and not (port.isdigit() and 1 <= int(port) <= 65535):
            return f'the port "{port}" is not a number from 1 to 65535'
    for name, choices in _CHOICES.items():
        value = parts.get(name)
        if value is not None and value not in choices:
            return f'{name} "{value}" is not one of {", ".join(choices)}'
    return None


def data_dir_problem(data_dir: object, named: str = "--data-dir") -> str | None:
    """Why a data directory given (as `named`: the option, or the variable it came from) cannot be used, or
    None: a database URL (`postgresql://…`, which a path reads as `postgresql:/…`) would have the embedded
    Postgres make a directory of that name and start there."""
    if str(data_dir).startswith(("postgresql:", "postgres:")):
        return f"{named} is a database URL, not a directory: give it as --database-url"
    return None


def described(url: str) -> str:
    """Where `url` points, as `host=… port=… dbname=… user=…` (what it names of these; no password)."""
    try:
        parts = conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "an unreadable URL"
    shown = " ".join(f"{name}={parts[name]}" for name in _SHOWN if parts.get(name))
    return shown or "libpq's defaults"


def following_the_primary(url: str) -> str:
    """`url` asking libpq for a server that takes writes (`target_session_attrs=read-write`) unless it asks
    for something of its own: of several hosts (`host=a,b`), the primary; of one name that a cluster
    manager moves, never a standby it still points at. libpq reads it from what the server reports as
    the connection starts (Postgres 14 on): no round trip of its own."""
    if conninfo_to_dict(url).get("target_session_attrs"):
        return url
    return make_conninfo(url, target_session_attrs="read-write")
