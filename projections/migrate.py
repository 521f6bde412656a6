"""Versioned SQL migrations, applied at start into one schema, each recorded in `schema_migrations`.

Files are `migrations/NNN_name.sql`, applied in number order with the target schema as the only
entry on `search_path`, so the same files build the live schema and any replay schema. Applying is
idempotent and serialised by a transaction-level advisory lock (two processes starting together
both succeed; the second finds nothing to do).
"""

from __future__ import annotations

import re
from importlib import resources

import psycopg
from psycopg import sql

_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
_FILE = re.compile(r"^(\d{3})_([a-z0-9_]+)\.sql$")
LIVE_SCHEMA = "mf"


class InvalidSchemaName(ValueError):
    pass


def check_schema(name: str) -> str:
    if not _SCHEMA_NAME.match(name):
        raise InvalidSchemaName(f"schema name {name!r}: use lower-case letters, digits and '_' (max 63)")
    return name


def migrations() -> list[tuple[int, str, str]]:
    """(version, name, sql) of every migration file, in order."""
    found = []
    for entry in resources.files("projections.migrations").iterdir():
        match = _FILE.match(entry.name)
        if match:
            found.append((int(match.group(1)), match.group(2), entry.read_text()))
    return sorted(found)


def lock_key(schema: str, purpose: str) -> str:
    return f"modelforge.{purpose}:{schema}"


async def migrate(conn: psycopg.AsyncConnection[object], schema: str) -> list[int]:
    """Bring `schema` up to date; returns the versions applied now (empty when current)."""
    check_schema(schema)
    applied_now: list[int] = []
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (lock_key(schema, "migrate"),))
        await conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
        await conn.execute(sql.SQL("SET LOCAL search_path TO {}").format(sql.Identifier(schema)))
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations ("
            " version int PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        cur = await conn.execute("SELECT version FROM schema_migrations")
        done = {row[0] for row in await cur.fetchall()}  # type: ignore[index]
        for version, name, text in migrations():
            if version in done:
                continue
            await conn.execute(text.encode())
            await conn.execute(
                "INSERT INTO schema_migrations (version, name) VALUES (%s, %s)", (version, name)
            )
            applied_now.append(version)
    return applied_now
