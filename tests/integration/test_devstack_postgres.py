"""The embedded stack's PostgreSQL: sized for a small read model."""

from __future__ import annotations

from pathlib import Path

import psycopg

from modelforge.devstack.postgres import EMBEDDED_SHARED_BUFFERS, start_postgres, stop_postgres


def test_the_stacks_postgres_runs_with_small_shared_buffers(scratch: Path, tmp_path: Path) -> None:
    server = start_postgres(scratch / tmp_path.name)
    try:
        with psycopg.connect(server.url) as conn:
            row = conn.execute("SHOW shared_buffers").fetchone()
        assert row == (EMBEDDED_SHARED_BUFFERS,)
    finally:
        stop_postgres(server)
