"""Each applied migration's sha256 is recorded; a file edited since a schema applied it is refused
at start, since its change would never run on that schema."""

from __future__ import annotations

import hashlib
from importlib import resources

import psycopg
import pytest

from modelforge.devstack.nats_server import NatsServer
from projections import projector
from projections.migrate import MigrationChanged, migrate


def file_sums() -> dict[int, str]:
    return {
        int(entry.name[:3]): hashlib.sha256(entry.read_bytes()).hexdigest()
        for entry in resources.files("projections.migrations").iterdir()
        if entry.name.endswith(".sql")
    }


async def test_a_schema_from_before_the_checksums_gets_the_files_sums(fresh_database: str) -> None:
    async with await psycopg.AsyncConnection.connect(fresh_database, autocommit=True) as conn:
        await migrate(conn, "mf")
        # As a schema migrated by a build without 007 left it.
        await conn.execute("DELETE FROM mf.schema_migrations WHERE version = 7")
        await conn.execute("ALTER TABLE mf.schema_migrations DROP COLUMN sha256")
        assert await migrate(conn, "mf") == [7]
        cur = await conn.execute("SELECT version, sha256 FROM mf.schema_migrations ORDER BY 1")
        assert dict(await cur.fetchall()) == file_sums()


async def test_a_migration_edited_after_it_was_applied_is_refused_at_start(
    private_nats: NatsServer, fresh_database: str
) -> None:
    async with await psycopg.AsyncConnection.connect(fresh_database, autocommit=True) as conn:
        await migrate(conn, "mf")
        # The schema applied a 002 whose text differs from today's file.
        await conn.execute("UPDATE mf.schema_migrations SET sha256 = %s WHERE version = 2", ("0" * 64,))
        with pytest.raises(
            MigrationChanged, match=r"migration 002_views\.sql changed after schema mf applied it"
        ):
            await migrate(conn, "mf")
    with pytest.raises(MigrationChanged, match="new migration"):
        await projector.run(fresh_database, private_nats.url, telemetry=False)
