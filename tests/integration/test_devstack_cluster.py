"""`modelforge up --cluster`: three nats-servers of the wheel with TLS on clients and routes and
every stream on all three, the rest of the stack as `up` runs it; `status` checks each server, a
later `up` restarts a lost one on its ports, and `down` stops them all."""

from __future__ import annotations

import asyncio
from pathlib import Path

import msgspec
import pytest

from eventstore.connection import connect
from modelforge.devstack.nats_cluster import MEMBERS, client_environment, cluster_urls
from modelforge.devstack.processes import free_port, pid_alive, stop_pid
from modelforge.devstack.stack import OPERATOR_ROLE, StackState
from streams import subjects
from tests.integration.test_devstack import _embed_with_the_printed_key, run


async def test_up_cluster_serves_over_tls_from_three_servers_and_down_stops_them(
    scratch: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = scratch / "devstack-cluster"
    started = await asyncio.to_thread(run, home, "up", "--cluster", "--gateway-port", str(free_port()))
    state = msgspec.json.decode((home / "stack.json").read_bytes(), type=StackState)
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        assert [(m.name, m.tls) for m in state.cluster] == [(name, True) for name in MEMBERS]
        assert state.nats is None
        await asyncio.to_thread(_embed_with_the_printed_key, started.stdout)
        status = await asyncio.to_thread(run, home, "status")
        assert status.returncode == 0, status.stdout + status.stderr
        assert {line.split()[0]: line.split()[1] for line in status.stdout.splitlines()} == dict.fromkeys(
            (*MEMBERS, "postgres", "projector", "agent", "gateway", "readyz", "projection"), "ok"
        )
        listed = await asyncio.to_thread(run, home, "clients", "list")  # a CLI verb finds it, over TLS
        assert "demo" in listed.stdout, listed.stderr
        for name, value in client_environment(home, OPERATOR_ROLE).items():
            monkeypatch.setenv(name, value)
        connection = await connect(cluster_urls(state.cluster), "devstack-cluster-test", first_connect_s=10)
        try:
            events = await connection.client.jetstream().stream_info(subjects.EVENTS_STREAM)
        finally:
            await connection.close()
        assert events.config.num_replicas == 3
        await _a_lost_server_shows_in_status_and_up_restarts_it_on_its_port(home, state)
    finally:
        down = await asyncio.to_thread(run, home, "down")
    assert down.returncode == 0, down.stderr
    assert not any(pid_alive(member.pid) for member in state.cluster)


async def _a_lost_server_shows_in_status_and_up_restarts_it_on_its_port(
    home: Path, state: StackState
) -> None:
    lost = state.cluster[1]
    stop_pid(lost.pid)
    status = await asyncio.to_thread(run, home, "status")
    assert status.returncode == 1
    assert f"{lost.name:<11} DOWN  down (pid {lost.pid} is gone)" in status.stdout
    again = await asyncio.to_thread(run, home, "up")  # a later `up` keeps the cluster
    assert again.returncode == 0, again.stdout + again.stderr
    after = msgspec.json.decode((home / "stack.json").read_bytes(), type=StackState)
    assert [m.port for m in after.cluster] == [m.port for m in state.cluster]  # the routes still name it
    assert after.cluster[0].pid == state.cluster[0].pid  # the others ran on
    assert pid_alive(after.cluster[1].pid)
    state.cluster[1] = after.cluster[1]  # for the caller's `down`
