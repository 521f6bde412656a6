"""The dev stack's nats-servers start on ports no other process holds: a server whose port is taken
fails at once (it never passes for the process that holds it), and a cluster whose planned route
port is taken before its member binds it starts all three again on other ports."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from modelforge.certs_cli import client_settings, make_certificates
from modelforge.devstack.nats_cluster import plan_members, start_all
from modelforge.devstack.nats_server import PortTaken, start_nats
from modelforge.devstack.processes import free_port, stop_pid
from modelforge.pki import default_identities
from tests.support.cluster import Cluster, elected


@pytest.fixture
def squatter() -> Iterator[socket.socket]:
    """Another process's listener on a port the dev stack could plan (it accepts and says nothing)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", free_port()))
        sock.listen()
        yield sock


def test_a_server_whose_client_port_is_taken_fails_with_port_taken(
    tmp_path: Path, squatter: socket.socket
) -> None:
    with pytest.raises(PortTaken, match="address already in use"):
        start_nats(tmp_path, squatter.getsockname()[1], detach=False)


def test_a_server_given_no_port_listens_on_the_one_it_reports(tmp_path: Path) -> None:
    server = start_nats(tmp_path, detach=False)
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as connection:
            assert connection.recv(4) == b"INFO"  # a NATS server greets first
    finally:
        stop_pid(server.pid)


def go_processors(pid: int) -> str | None:
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    found = [item.split(b"=", 1)[1].decode() for item in environ if item.startswith(b"GOMAXPROCS=")]
    return found[0] if found else None


def test_a_server_runs_go_on_one_processor_unless_the_environment_says_otherwise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GOMAXPROCS", raising=False)
    plain = start_nats(tmp_path / "plain", detach=False)
    monkeypatch.setenv("GOMAXPROCS", "4")
    told = start_nats(tmp_path / "told", detach=False)
    try:
        assert (go_processors(plain.pid), go_processors(told.pid)) == ("1", "4")
    finally:
        stop_pid(plain.pid)
        stop_pid(told.pid)


async def test_a_cluster_whose_planned_route_port_is_taken_starts_on_others_and_elects(
    tmp_path: Path, squatter: socket.socket, monkeypatch: pytest.MonkeyPatch
) -> None:
    certs = tmp_path / "certs"
    make_certificates(certs, default_identities())
    for name, value in client_settings(certs, "gateway").items():
        monkeypatch.setenv(name, value)
    squatted, other = plan_members(), plan_members()
    squatted[1].route_port = squatter.getsockname()[1]
    plans = iter([squatted, other])
    cluster = Cluster(start_all(tmp_path, lambda: next(plans), certs, detach=False), certs)
    try:
        assert [m.route_port for m in cluster.members] == [m.route_port for m in other]
        await elected(cluster)  # all three up: a fresh cluster missing one never elects
    finally:
        cluster.stop()
