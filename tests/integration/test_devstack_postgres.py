"""The embedded stack's PostgreSQL: sized for a small read model, no more processes than it uses,
and background processes that wake seldom."""

from __future__ import annotations

from pathlib import Path

import psycopg

from modelforge.devstack.postgres import EMBEDDED_SETTINGS, QUIET_SETTINGS, start_postgres, stop_postgres


def test_the_stacks_postgres_runs_small_with_no_replication_launcher_and_few_wake_ups(
    scratch: Path, tmp_path: Path
) -> None:
    server = start_postgres(scratch / tmp_path.name)
    try:
        with psycopg.connect(server.url) as conn:
            wanted = {**EMBEDDED_SETTINGS, **QUIET_SETTINGS}
            settings = {name: conn.execute(f"SHOW {name}").fetchone() for name in wanted}
            launchers = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'logical replication launcher'"
            ).fetchone()
        assert settings == {name: (value,) for name, value in wanted.items()}
        assert launchers == (0,)
    finally:
        stop_postgres(server)
