"""Versioned SQL migrations, applied at start into one schema, each recorded in `schema_migrations`.

Files are `migrations/NNN_name.sql`, applied in number order with the target schema as the only
entry on `search_path`, so the same files build the live schema and any replay schema. Applying is
idempotent and serialised by a transaction-level advisory lock (two processes starting together
both succeed; the second finds nothing to do). Each applied file's sha256 is recorded (since 007;
rows from before get the files' sums then): a file edited since a schema applied it is refused
(`MigrationChanged`), as its change would never run on that schema.
"""

from __future__ import annotations

import hashlib
import re
from importlib import resources

import psycopg
from psycopg import sql

_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
_FILE = re.compile(r"^(\d{3})_([a-z0-9_]+)\.sql$")
LIVE_SCHEMA = "mf"


class InvalidSchemaName(ValueError):
    pass


class MigrationChanged(Exception):
    """A migration file differs from the one a schema applied."""


def check_schema(name: str) -> str:
    if not _SCHEMA_NAME.match(name):
        raise InvalidSchemaName(f"schema name {name!r}: use lower-case letters, digits and '_' (max 63)")
    return name


def migrations() -> list[tuple[int, str, str, str]]:
    """(version, name, sql, sha256 of the file) of every migration file, in order."""
    found = []
    for entry in resources.files("projections.migrations").iterdir():
        match = _FILE.match(entry.name)
        if match:
            raw = entry.read_bytes()
            found.append((int(match.group(1)), match.group(2), raw.decode(), hashlib.sha256(raw).hexdigest()))
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
        # to_jsonb(m): the sha256 column exists only once 007 is applied
        cur = await conn.execute("SELECT version, to_jsonb(m)->>'sha256' FROM schema_migrations m")
        done: dict[int, str | None] = {row[0]: row[1] for row in await cur.fetchall()}  # type: ignore[index]
        files = migrations()
        for version, name, text, sha256 in files:
            if done.get(version) not in (None, sha256):
                raise MigrationChanged(
                    f"migration {version:03d}_{name}.sql changed after schema {schema} applied it"
                    f" (sha256 {done[version]} then, {sha256} now): its change would never run there."
                    " Restore the file as it was and put the change in a new migration"
                )
            if version in done:
                continue
            await conn.execute(text.encode())
            await conn.execute(
                "INSERT INTO schema_migrations (version, name) VALUES (%s, %s)", (version, name)
            )
            applied_now.append(version)
        for version, _name, _text, sha256 in files:
            await conn.execute(
                "UPDATE schema_migrations SET sha256 = %s WHERE version = %s AND sha256 IS NULL",
                (sha256, version),
            )
    return applied_now
