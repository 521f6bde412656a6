"""The embedded stack's PostgreSQL: sized for a small read model, and no more processes than it uses."""

from __future__ import annotations

from pathlib import Path

import psycopg

from modelforge.devstack.postgres import EMBEDDED_SETTINGS, start_postgres, stop_postgres


def test_the_stacks_postgres_runs_with_small_shared_buffers_and_no_replication_launcher(
    scratch: Path, tmp_path: Path
) -> None:
    server = start_postgres(scratch / tmp_path.name)
    try:
        with psycopg.connect(server.url) as conn:
            settings = {name: conn.execute(f"SHOW {name}").fetchone() for name in EMBEDDED_SETTINGS}
            launchers = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'logical replication launcher'"
            ).fetchone()
        assert settings == {name: (value,) for name, value in EMBEDDED_SETTINGS.items()}
        assert launchers == (0,)
    finally:
        stop_postgres(server)
