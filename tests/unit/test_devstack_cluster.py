"""`up --cluster`'s servers: each member's config routes to all three and asks for TLS with a
certificate on its client port and its routes; a state folder whose log lives on one server is
never turned into a cluster."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from modelforge.devstack import stack
from modelforge.devstack.nats_cluster import member_config
from modelforge.devstack.nats_server import NatsServer


def test_a_member_routes_to_every_member_and_asks_for_tls_on_clients_and_routes(tmp_path: Path) -> None:
    config = member_config("nats-2", 7002, [7001, 7002, 7003], tmp_path)
    cluster = config[config.index("cluster {") :]
    assert (
        "routes: [nats-route://127.0.0.1:7001, nats-route://127.0.0.1:7002, nats-route://127.0.0.1:7003]"
        in cluster
    )
    assert "listen: 127.0.0.1:7002" in cluster
    blocks = re.findall(r"tls \{[^}]*\}", config)
    assert len(blocks) == 2  # the client port's, and inside cluster {} the routes'
    for block in blocks:
        assert f'cert_file: "{tmp_path / "nats-2" / "cert.pem"}"' in block
        assert f'ca_file: "{tmp_path / "nats-2" / "ca.pem"}"' in block
        assert "verify: true" in block
    assert "server_name: nats-2" in config


def test_a_member_without_certificates_speaks_plain_nats() -> None:
    assert "tls" not in member_config("nats-1", 7001, [7001, 7002, 7003], None)


def test_up_cluster_is_refused_where_the_log_lives_on_one_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NATS_URL", raising=False)
    stack.save_state(tmp_path, stack.StackState(nats=NatsServer(0, 4222, "", "")))
    with pytest.raises(stack.StackRefused, match="in a MODELFORGE_HOME of its own"):
        stack.up(tmp_path, lambda url: None, lambda line: None, cluster=True)
    assert not (tmp_path / "certs").exists()
    assert not stack.clustered(stack.load_state(tmp_path))


def test_up_cluster_is_refused_where_nats_url_names_another_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NATS_URL", "nats://elsewhere:4222")
    with pytest.raises(stack.StackRefused, match="NATS_URL nats://elsewhere:4222"):
        stack.up(tmp_path, lambda url: None, lambda line: None, cluster=True)


def _gateway_env(home: Path, cluster: bool) -> dict[str, str]:
    state = stack.StackState(extra={"gateway_port": "8080", **({"cluster": "1"} if cluster else {})})
    (env,) = [own for name, _, own in stack.components(home, state) if name == "gateway"]
    return env


def test_up_gives_its_gateway_standby_leases_on_a_cluster_and_on_one_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(stack.STANDBY_LEASES_ENV, raising=False)
    assert _gateway_env(tmp_path, cluster=True)[stack.STANDBY_LEASES_ENV] == stack.STANDBY_SLOTS
    assert _gateway_env(tmp_path, cluster=False)[stack.STANDBY_LEASES_ENV] == stack.STANDBY_SLOTS


def test_up_cluster_keeps_the_standby_slots_its_environment_sets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(stack.STANDBY_LEASES_ENV, "0")
    assert _gateway_env(tmp_path, cluster=True)[stack.STANDBY_LEASES_ENV] == "0"
