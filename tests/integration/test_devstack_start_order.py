"""`up` starts the agents and the gateway while PostgreSQL starts (they need no database to start):
one whose PostgreSQL then fails to start stops what it started, rather than leaving a gateway and
agents running for a stack that is not up."""

from __future__ import annotations

from pathlib import Path

import pytest

from modelforge.devstack import stack
from modelforge.devstack.postgres import cluster_base, postgres_user
from modelforge.devstack.processes import free_port, pid_alive


def _processes_of(home: Path) -> list[int]:
    """The live processes started with `home` as their MODELFORGE_HOME."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"MODELFORGE_HOME={home}".encode() in environ and pid_alive(int(entry.name)):
            found.append(int(entry.name))
    return found


def test_an_up_whose_postgres_cannot_start_leaves_no_gateway_or_agent_running(
    scratch: Path, tmp_path: Path
) -> None:
    home = scratch / tmp_path.name
    home.mkdir(mode=0o755)
    # The data folder of a PostgreSQL major version that does not exist: pg_ctl refuses to start it.
    data = cluster_base(home, postgres_user()) / "data"
    data.mkdir(parents=True)
    (data / "PG_VERSION").write_text("99\n")
    try:
        with pytest.raises(RuntimeError, match="pg_ctl failed"):
            stack.up(home, lambda url: None, lambda line: None, gateway_port=free_port())
        assert (home / "logs" / "gateway.log").exists()  # it had started them
        assert (home / "logs" / "agent.log").exists()
        assert _processes_of(home) == []
    finally:
        stack.down(home, lambda line: None)
